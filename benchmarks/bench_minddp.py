"""minddp vs torch DDP: iteration time at world size 2 on each zoo model.

    python benchmarks/bench_minddp.py [--pairs 20] [--models mlp,convnet,...]

Both wrappers train their own copy of the model in the same 2 gloo ranks; timed
iterations alternate torch, minddp, torch, minddp... (so drift hits both), each
starting after a barrier. Each rank is pinned to its own core. Prints, per model,
the median of the per-pair ratios minddp/torch, their min/max and IQR, and the
median iteration times. branchy runs with find_unused_parameters=True (it needs it).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from distutil import run_ranks  # noqa: E402

MODELS = ["mlp", "convnet", "transformer", "branchy", "shuffled"]


def _setup(impl, name, rank):
    import torch
    from torch import nn

    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload

    torch.manual_seed(0)
    w = build_workload(name)
    cls = nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    ddp = cls(w.model, find_unused_parameters=(name == "branchy"))
    return w, ddp, torch.optim.SGD(w.model.parameters(), lr=0.01)


def _step(w, ddp, opt, it, rank, world_size):
    import torch.distributed as dist

    from ddpsim.models import call_batch

    inputs, target = call_batch(w, it, rank, world_size, None)
    dist.barrier()
    start = time.perf_counter()
    opt.zero_grad()
    w.loss(ddp(*inputs), target).backward()
    opt.step()
    return time.perf_counter() - start


def bench_rank(rank, world_size, models, pairs, warmup):
    import torch

    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= world_size:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[rank]})
    out = {}
    for name in models:
        runs = {impl: _setup(impl, name, rank) for impl in ("torch", "minddp")}
        times = {"torch": [], "minddp": []}
        for it in range(warmup + pairs):
            order = ("torch", "minddp") if it % 2 == 0 else ("minddp", "torch")
            for impl in order:
                t = _step(*runs[impl], it, rank, world_size)
                if it >= warmup:
                    times[impl].append(t)
        out[name] = times
        del runs
    return out


def summarize(name, times):
    ratios = sorted(m / t for m, t in zip(times["minddp"], times["torch"]))
    q = statistics.quantiles(ratios, n=4)
    return (f"{name:12s} ratio median {statistics.median(ratios):.3f}  "
            f"min {ratios[0]:.3f} max {ratios[-1]:.3f}  IQR {q[0]:.3f}-{q[2]:.3f}  "
            f"torch {1e3 * statistics.median(times['torch']):7.1f} ms  "
            f"minddp {1e3 * statistics.median(times['minddp']):7.1f} ms")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args(argv)
    models = args.models.split(",")
    per_rank = run_ranks(bench_rank, 2, args=(models, args.pairs, args.warmup), timeout=1800)
    print(f"world size 2, gloo, {args.pairs} interleaved pairs per model (rank 0 times)")
    for name in models:
        print(summarize(name, per_rank[0][name]))


if __name__ == "__main__":
    main()
