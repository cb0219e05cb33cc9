# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Part 1 reference solution: gradient bucket assignment (instructors only).

Mirrors ``compute_bucket_assignment_by_size`` in torch/csrc/distributed/c10d/reducer.cpp.
"""
from __future__ import annotations


def compute_bucket_assignment_by_size(tensors, bucket_size_limits, expect_sparse_gradient=(),
                                      tensor_indices=()):
    indices = list(tensor_indices) or list(range(len(tensors)))
    closed = []  # (bucket, limit) in the order buckets close
    open_buckets = {}  # (dtype, device) -> [indices, bytes]
    limit_pos = {}  # (dtype, device) -> position in bucket_size_limits
    for tensor, index in zip(tensors, indices):
        if expect_sparse_gradient and expect_sparse_gradient[index]:
            closed.append(([index], 0))
            continue
        key = (tensor.dtype, tensor.device)
        bucket = open_buckets.setdefault(key, [[], 0])
        pos = limit_pos.setdefault(key, 0)
        bucket[0].append(index)
        bucket[1] += tensor.numel() * tensor.element_size()
        limit = bucket_size_limits[pos]
        if bucket[1] >= limit:  # closes *after* adding: overshoot, never split
            closed.append((bucket[0], limit))
            open_buckets[key] = [[], 0]
            limit_pos[key] = min(pos + 1, len(bucket_size_limits) - 1)
    for key, (members, _) in open_buckets.items():
        if members:
            closed.append((members, bucket_size_limits[limit_pos[key]]))
    if not tensor_indices:
        closed.sort(key=lambda c: min(c[0]))
    return [c[0] for c in closed], [c[1] for c in closed]
