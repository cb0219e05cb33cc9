"""Part 1: gradient bucket assignment (starter file).

Implement ``compute_bucket_assignment_by_size`` so that it returns exactly what
torch's own ``torch.distributed._compute_bucket_assignment_by_size`` returns.
Read HANDOUT.md first. Grade yourself with:

    python -m ddpsim.grade part1 assignments/part1/buckets.py

Do not import torch's implementation (or ddpsim.minddp's): the autograder checks
that this file does not call them.
"""
from __future__ import annotations


def compute_bucket_assignment_by_size(tensors, bucket_size_limits, expect_sparse_gradient=(),
                                      tensor_indices=()):
    """Group ``tensors`` (gradients, in the order given) into buckets.

    Arguments (the same as torch's):
      tensors: a list of torch.Tensor (only .dtype, .device, .numel(), .element_size() matter)
      bucket_size_limits: a list of byte limits, e.g. [1 MiB, 25 MiB]. Each (dtype, device)
          group uses the first limit for its first bucket, the second for its second, ...,
          and then stays on the last one.
      expect_sparse_gradient: optional list of bools indexed by *tensor index*; a sparse
          tensor gets a bucket of its own, with limit 0.
      tensor_indices: optional list; tensor_indices[i] is the index of tensors[i]. Empty
          means tensors[i] has index i.

    Returns ``(bucket_indices, per_bucket_size_limits)``: a list of buckets (each a list
    of tensor indices) and, for each bucket, the limit it was built under.
    """
    # TODO 1: walk the tensors in the order given. Keep one open bucket per
    #         (dtype, device). Add the tensor's index and bytes (numel * element_size)
    #         to its group's open bucket.
    # TODO 2: close a bucket as soon as its size is >= its current limit *after*
    #         adding a tensor (so a tensor is never split, and a bucket may overshoot).
    #         The group then moves on to its next limit (stay on the last one).
    # TODO 3: sparse tensors: a bucket of their own, limit 0.
    # TODO 4: after the loop, the still-open buckets are buckets too.
    # TODO 5: when tensor_indices is empty, sort the buckets by their smallest index;
    #         otherwise keep them in the order they were closed.
    raise NotImplementedError("compute_bucket_assignment_by_size: TODO 1-5 in buckets.py")
