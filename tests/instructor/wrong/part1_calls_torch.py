# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong: not the student's own work. Calls torch's C++ bucket assignment through a name built
at run time, which a look at the source (the old check) does not see."""
import torch.distributed as dist

_NAME = "_compute_bucket_" + "assignment_by_size"


def compute_bucket_assignment_by_size(tensors, bucket_size_limits, expect_sparse_gradient=(),
                                      tensor_indices=()):
    return getattr(dist, _NAME)(tensors, bucket_size_limits, list(expect_sparse_gradient),
                                list(tensor_indices))
