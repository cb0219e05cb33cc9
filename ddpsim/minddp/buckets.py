"""Bucket assignment and the flat gradient buffers of the readable reducer.

The assignment itself is ``ddpsim.buckets`` (torch's ``compute_bucket_assignment_by_size``,
shared with the simulator); here it is applied to tensors, next to the bucket bookkeeping
of ``Reducer::initialize_buckets`` / ``initialize_bucket_views`` in
``torch/csrc/distributed/c10d/reducer.cpp`` (torch 2.13).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ddpsim import buckets, torchcompat


def compute_bucket_assignment_by_size(tensors, bucket_size_limits, expect_sparse_gradient=(),
                                      tensor_indices=()):
    """Mirrors ``compute_bucket_assignment_by_size`` in reducer.cpp, on torch tensors.

    Returns ``(bucket_indices, per_bucket_size_limits)`` like
    ``torch.distributed._compute_bucket_assignment_by_size``. The algorithm is
    ``ddpsim.buckets.compute_bucket_assignment_by_size`` (Note [Bucket assignment by
    size], Note [Leftover buckets follow the hash map]), shared with the simulator.
    """
    return buckets.compute_bucket_assignment_by_size(
        [buckets.spec_of(t) for t in tensors], bucket_size_limits, expect_sparse_gradient,
        tensor_indices)


def broadcast_layout(indices, limits, group, device=None):
    """The two broadcasts of ``Reducer::sync_bucket_indices``: rank 0's layout wins.

    First the flat parameter indices + the bucket count (same length on every
    rank: each parameter once), then the bucket sizes (and, for the recorder, the
    caps), whose count is now known from rank 0. ``device``: the parameters' (NCCL
    broadcasts device tensors only; reducer.cpp uses ``params_[0].device()``).
    """
    flat = torch.tensor(sum(indices, []) + [len(indices)], dtype=torch.int64, device=device)
    dist.broadcast(flat, 0, group=group)
    n = int(flat[-1])
    sizes = [len(b) for b in indices] + [0] * n
    meta = torch.tensor(sizes[:n] + (list(limits) + [0] * n)[:n], dtype=torch.int64, device=device)
    dist.broadcast(meta, 0, group=group)
    flat, meta = flat.tolist(), meta.tolist()
    out, start = [], 0
    for size in meta[:n]:
        out.append(flat[start:start + size])
        start += size
    return out, meta[n:]


@dataclass
class Bucket:
    """Mirrors ``Reducer::Bucket`` (reducer.hpp): one flat buffer, one allreduce."""

    index: int
    variable_indices: list[int]
    cap_bytes: int
    gradients: torch.Tensor  # the flat buffer that is allreduced
    views: list[torch.Tensor]  # bucket_views_in == bucket_views_out for allreduce
    pending: int = 0
    deferred_copy_indices: list[int] = field(default_factory=list)  # batched_grad_copy (minddp/batched_copy.py)
    future: object = None  # the allreduce's future (chained to the recorder callback)
    event: dict | None = field(default=None, repr=False)  # RankRecorder bucket event

    @property
    def nbytes(self) -> int:
        return self.gradients.numel() * self.gradients.element_size()

    def describe(self) -> dict:
        """The layout entry a RankRecorder expects."""
        return {"index": self.index, "params": list(self.variable_indices),
                "bytes": self.nbytes, "cap_bytes": self.cap_bytes}


def make_bucket(index, variable_indices, cap_bytes, params) -> Bucket:
    """Mirrors the body of ``initialize_buckets`` + ``initialize_bucket_views``.

    Note [Gradient layout contract]: each parameter gets a view into the flat
    buffer with the parameter's own sizes and strides (``as_strided``), because
    AccumulateGrad creates gradients with the parameter's strides; matching them
    keeps ``copy_`` in and out of the bucket a straight memory copy
    (reducer.cpp, ``initialize_bucket_views``).
    """
    members = [params[i] for i in variable_indices]
    first = members[0]
    if any(p.dtype != first.dtype or p.device != first.device for p in members):
        raise ValueError("all parameters in a bucket must share dtype and device")
    gradients = torch.empty(sum(p.numel() for p in members), dtype=first.dtype, device=first.device)
    views = bucket_views(gradients, members)
    return Bucket(index, list(variable_indices), cap_bytes, gradients, views)


def bucket_views(tensor, members) -> list[torch.Tensor]:
    """One view of ``tensor`` per parameter, with the parameter's sizes and, where it is
    non-overlapping and dense, its strides as they are now (Note [Gradient layout contract]): the
    body of ``initialize_bucket_views``, and of ``populate_bucket_views_out`` for a hook's result."""
    views, offset = [], 0
    for p in members:
        if torchcompat.is_non_overlapping_and_dense(p):
            views.append(tensor.as_strided(p.size(), p.stride(), offset))
        else:
            views.append(tensor.narrow(0, offset, p.numel()).view(p.size()))
        offset += p.numel()
    return views
