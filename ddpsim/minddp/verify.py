"""The check that every rank wraps the same model, before anything is broadcast.

Mirrors ``_verify_param_shape_across_processes`` (torch/nn/parallel/distributed.py), which calls
``verify_params_across_processes`` in torch/csrc/distributed/c10d/reducer.cpp (torch 2.13).

Note [Same model on every rank, checked first]: DDP's next step broadcasts rank 0's parameters
into every rank's, coalesced into flat buffers. If the ranks' parameters differ in number or
shape, those broadcasts disagree on sizes: gloo aborts the process, or, worse, a rank receives
bytes meant for another tensor. So DDP first allgathers the number of parameters (every rank
raises on a mismatch: the count decides the size of what follows), then broadcasts rank 0's
sizes and strides and each rank compares its own (only the ranks that differ raise; rank 0,
the source, goes on to the broadcast and waits there, as in torch). Dtypes are not compared.

Note [init_sync]: both steps, the check and the broadcast of rank 0's parameters and buffers
(``_sync_module_states``), run only when ``init_sync=True`` (torch 2.13's default). With
``init_sync=False`` the constructor issues no collective at all: each rank keeps the parameters
and buffers it was built with, and a model that differs across ranks is not caught (torch's
docstring: the user must make sure the weights are the same on all ranks). Measured on 2 gloo
ranks, torch 2.13 and minddp alike: no gloo collective at construction, each rank's own seeded
weights and a buffer holding its rank kept, a rank with one Linear more constructed without error;
the first forward still broadcasts rank 0's buffers (forward_sync_buffers), never parameters, and
gradients are averaged as ever, so the ranks' weights stay different. ``broadcast_buffers=False``
(deprecated) leaves buffers out of the init sync; ``forward_sync_buffers`` does not touch it.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def verify_params_across_processes(process_group, params: list[torch.Tensor]) -> None:
    """Mirrors reducer.cpp's ``verify_params_across_processes``: raises RuntimeError, in torch's
    words, when this rank's parameters differ from the others' in number, or from rank 0's in
    sizes or strides (Note [Same model on every rank, checked first])."""
    rank, world = dist.get_rank(process_group), dist.get_world_size(process_group)
    device = params[0].device
    count = torch.tensor([len(params)], dtype=torch.long, device=device)
    counts = [torch.empty_like(count) for _ in range(world)]
    dist.all_gather(counts, count, group=process_group)
    for i, theirs in enumerate(int(c.item()) for c in counts):
        if theirs != len(params):
            raise RuntimeError(f"DDP expects same model across all ranks, but Rank {rank} has {len(params)} params, "
                               f"while rank {i} has inconsistent {theirs} params.")
    mine = [v for t in params for v in (*t.shape, *t.stride())]
    control = torch.tensor(mine, dtype=torch.long).to(device)
    src = 0 if process_group in (None, dist.group.WORLD) else dist.get_global_rank(process_group, 0)
    dist.broadcast(control, src, group=process_group)  # the group's rank 0's sizes and strides, in place of ours
    expected = iter(control.cpu().tolist())
    for p, t in enumerate(params):
        sizes = list(t.shape)
        if any(size != next(expected) for size in sizes):
            raise RuntimeError(f"[{rank}]: params[{p}] in this process with sizes {sizes} appears not to match "
                               "sizes of the same param in process 0.")
        if any(stride != next(expected) for stride in t.stride()):
            raise RuntimeError(f"params[{p}] in this process with sizes {sizes} appears not to match strides "
                               "of the same param in process 0.")
