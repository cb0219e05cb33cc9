"""Is a CPU backward's thread CPU time its compute alone? Plain DDP against DDP with noop, interleaved.

Each of 2 gloo ranks (one torch thread, pinned to core ``rank % cpus`` as a recording pins them)
holds two DDP wrappers over identical copies of a zoo model, one plain and one with torch's
``noop_hook``, and steps them in turn (a barrier before each step). For each it times the
backward's wall time and the CPU time of the thread that called ``backward()``
(``time.thread_time``). Note [The backward's compute alone] in ddpsim/record/instrument.py:
the plain run's thread CPU time should be the noop run's wall time, where nothing else runs.

    python benchmarks/bench_compute_alone.py [--models mlp,shuffled,transformer] [--iters 20]

Prints, per model and cap, rank 0's medians over the steps after the first three.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpsim.ranks import run_ranks  # noqa: E402
from ddpsim.record.process import pin_to_cpu  # noqa: E402

CAPS = (0.25, None)  # MiB; None: torch's default


def steps(rank: int, world: int, model: str, cap, iters: int) -> dict:
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddpsim.models import build_workload, call_batch

    pin_to_cpu(rank)
    runs = {}
    for name in ("plain", "noop"):
        torch.manual_seed(0)
        work = build_workload(model)
        ddp = DDP(work.model, **({} if cap is None else {"bucket_cap_mb": cap}))
        if name == "noop":
            ddp.register_comm_hook(None, debugging_hooks.noop_hook)
        runs[name] = (ddp, work, torch.optim.SGD(ddp.parameters(), lr=1e-3), {"wall": [], "cpu": []})
    for i in range(iters):
        for ddp, work, opt, times in runs.values():
            dist.barrier()
            inputs, target = call_batch(work, i, rank, world, None)
            loss = work.loss(ddp(*inputs), target)
            t, c = time.perf_counter(), time.thread_time()
            loss.backward()
            if i >= 3:
                times["wall"].append(time.perf_counter() - t)
                times["cpu"].append(time.thread_time() - c)
            opt.step()
            opt.zero_grad()
    return {name: {k: statistics.median(v) * 1e3 for k, v in run[3].items()} for name, run in runs.items()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,shuffled,transformer")
    p.add_argument("--iters", type=int, default=20)
    args = p.parse_args(argv)
    print("model, cap: plain backward wall / thread CPU ms | noop backward wall / thread CPU ms (rank 0)")
    for model in args.models.split(","):
        for cap in CAPS:
            r = run_ranks(steps, 2, args=(model, cap, args.iters), timeout=600)[0]
            plain, noop = r["plain"], r["noop"]
            print(f"{model}, {'default' if cap is None else cap}: {plain['wall']:.1f} / {plain['cpu']:.1f} | "
                  f"{noop['wall']:.1f} / {noop['cpu']:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
