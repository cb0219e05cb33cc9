# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong: a bucket closes once its size is > its limit, where reducer.cpp closes it at >=. Random
limits almost never equal a bucket's size, so the generated checks passed it (8 of their 12 points)."""
from __future__ import annotations


def compute_bucket_assignment_by_size(tensors, bucket_size_limits, expect_sparse_gradient=(),
                                      tensor_indices=()):
    result = []          # (indices, limit) in closing order
    open_ = {}           # key -> [indices, size, limit_pos]
    order = []           # keys in first-seen order (for the leftovers)
    for i, t in enumerate(tensors):
        index = tensor_indices[i] if len(tensor_indices) else i
        if len(expect_sparse_gradient) and expect_sparse_gradient[index]:
            result.append(([index], 0))
            continue
        key = (t.dtype, t.device)
        if key not in open_:
            open_[key] = [[], 0, 0]
            order.append(key)
        b = open_[key]
        b[0].append(index)
        b[1] += t.numel() * t.element_size()
        limit = bucket_size_limits[min(b[2], len(bucket_size_limits) - 1)]
        if b[1] > limit:
            result.append((b[0], limit))
            open_[key] = [[], 0, b[2] + 1]
    for key in order:
        b = open_[key]
        if b[0]:
            result.append((b[0], bucket_size_limits[min(b[2], len(bucket_size_limits) - 1)]))
    if not len(tensor_indices):
        result.sort(key=lambda r: min(r[0]))
    return [r[0] for r in result], [r[1] for r in result]
