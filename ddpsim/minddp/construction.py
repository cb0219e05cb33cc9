"""What ``DistributedDataParallel.__init__`` (torch/nn/parallel/distributed.py, torch 2.13) decides
from its arguments before any Reducer exists: which parameters DDP manages
(``_build_params_for_reducer``) and the buffer flags (Note [Two buffer flags])."""
from __future__ import annotations

import warnings

from torch import nn

from ddpsim import buckets

BROADCAST_BUCKET_BYTES = 250 * buckets.MIB  # distributed.py: self.broadcast_bucket_size
BOTH_BUFFER_FLAGS = ("Both `broadcast_buffers` and `forward_sync_buffers` were specified. `broadcast_buffers` is "
                     "deprecated and its value is ignored when `forward_sync_buffers` is provided.")
BROADCAST_BUFFERS_DEPRECATED = (
    "`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead. IMPORTANT: unlike "
    "`broadcast_buffers=False`, `forward_sync_buffers=False` still syncs buffers at init. If you rely on "
    "buffers NOT being synced at init (e.g. rank-local buffers), keep using `broadcast_buffers=False` until "
    "`init_sync_buffers` is available.")


def buffer_sync_flags(broadcast_buffers, forward_sync_buffers):
    """Mirrors the buffer flags of ``DistributedDataParallel.__init__`` (torch 2.13): returns
    (forward_sync_buffers, init_sync_buffers), with torch's FutureWarnings.

    Note [Two buffer flags]: ``broadcast_buffers=False`` meant no buffer broadcast at all, at
    construction nor before each forward. 2.13 deprecates it for ``forward_sync_buffers``, which
    governs only the broadcasts before each forward (and Join's final sync): buffers are always
    synced at construction then. Given both, ``forward_sync_buffers`` wins. ``None`` is not given.
    Measured on 2 gloo ranks with a buffer filled with the rank: broadcast_buffers=False leaves
    rank 1 its own buffer at construction, forward_sync_buffers=False gives it rank 0's.
    """
    if broadcast_buffers is not None:
        message = BROADCAST_BUFFERS_DEPRECATED if forward_sync_buffers is None else BOTH_BUFFER_FLAGS
        warnings.warn(message, FutureWarning, stacklevel=3)
    if forward_sync_buffers is not None:
        return bool(forward_sync_buffers), True
    effective = True if broadcast_buffers is None else bool(broadcast_buffers)
    return effective, effective


def build_params_for_reducer(module: nn.Module):
    """Mirrors ``DistributedDataParallel._build_params_for_reducer``.

    named_modules() x named_parameters(recurse=False), requires_grad only; a
    parameter shared by several modules (tied weights) counts once, under the name
    of its first module. Returns (params, names, expect_sparse_gradient).
    """
    params, names, sparse, memo = [], [], [], set()
    for module_name, m in module.named_modules():
        for param_name, p in m.named_parameters(recurse=False):
            if p.requires_grad and p not in memo:
                memo.add(p)
                params.append(p)
                names.append(f"{module_name}.{param_name}" if module_name else param_name)
                sparse.append(isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse)
    return params, names, sparse
