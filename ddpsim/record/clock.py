"""Aligning the ranks' clocks.

Every rank stamps events with ``time.perf_counter_ns()``. On one host all
processes share that clock, so nothing needs correcting. Across hosts the clocks
have different origins, so the offset of each rank's clock from rank 0's is
estimated with barriers: all ranks leave a barrier at nearly the same instant, so
the difference of their readings just after it is the offset plus the barrier's
release skew. The median over several rounds is the estimate; the spread of the
rounds (max - min) is recorded as the estimated skew.
"""
from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from ddpsim.events import host_name, now_ns

ROUNDS = 7  # barrier rounds for the estimate


def estimate_offsets(device: torch.device) -> dict:
    """Collective: every rank calls it. Returns this rank's offset and the run-wide picture.

    {"offset_ns": this rank's clock minus rank 0's (0 when all ranks share a host),
     "same_host": bool, "skew_ns": spread of the per-round estimates (max over ranks),
     "method": "shared-clock" | "barrier"}
    """
    world = dist.get_world_size()
    readings = []
    for _ in range(ROUNDS):
        dist.barrier()
        readings.append(now_ns())
    mine = torch.tensor(readings, dtype=torch.int64, device=device)
    gathered = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    hosts = [None] * world
    dist.all_gather_object(hosts, host_name())  # Note [Which ranks share a clock] in events.py
    rank0 = gathered[0].cpu().tolist()
    per_rank = [[a - b for a, b in zip(g.cpu().tolist(), rank0)] for g in gathered]
    estimates = [statistics.median(d) for d in per_rank]
    skew = max(max(d) - min(d) for d in per_rank)
    same_host = len(set(hosts)) == 1
    me = dist.get_rank()
    return {
        "offset_ns": 0 if same_host else int(estimates[me]),
        "same_host": same_host,
        "skew_ns": int(skew),
        "barrier_offset_ns": int(estimates[me]),
        "method": "shared-clock" if same_host else "barrier",
    }
