"""How much one gloo allreduce slows the compute beside it, against what the simulator charges.

Run: python benchmarks/bench_interference.py [--world-size 4] [--sizes-mib 0.25,1,4,16] [--reps 5]

Every rank is pinned as the recorder pins it (rank r on CPU r % cpus, one thread)
and runs a loop of 192x192 matmuls. In each timed window it launches back-to-back
allreduces of one size (``async_op``), computing until each completes, for about
``--window`` seconds; a window of the same loop without allreduces, just before,
gives the clean time per matmul. The compute lost per allreduce on a rank is

    (window time - matmuls done x clean time per matmul) / allreduces in the window

(median over ``--reps`` windows, rank 0). The simulator's shared-core model charges
each rank ``ranks per core x CPU time`` of ``ddpsim calibrate`` (Note [Latency-bound
jobs on a shared core], Note [Ranks that share a CPU]); the table prints both.

Measured here (2 cores, 2026-11-21; noisy, a few runs): at 4 ranks a 4 MiB allreduce
cost each rank 9-12 ms of compute where the model charges 7-8 ms, 16 MiB 38-52 ms
against 22-28 ms; at 2 ranks 4 MiB cost 3.9 ms against 2.4 ms. So beside compute an
allreduce costs ~1.4-2x its CPU time (about 1x below 1 MiB at 4 ranks).
The last line is one JSON object with the figures.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddpsim.experiments.calibrate import calibrate, run_ranks  # noqa: E402
from ddpsim.learn.contention import ranks_per_core  # noqa: E402

MATMUL = 192  # side of the square matmul the compute loop repeats (~0.2 ms alone here)


def _worker(rank: int, world: int, store: str, sizes: list[int], reps: int, window: float, out: str) -> None:
    import torch
    import torch.distributed as dist

    from ddpsim.record.probe import AllreduceProbe
    from ddpsim.record.process import pin_to_cpu

    torch.set_num_threads(1)
    pin_to_cpu(rank)
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    a = torch.randn(MATMUL, MATMUL)

    def clean() -> float:  # seconds per matmul, all ranks computing
        dist.barrier()
        t0, n = time.perf_counter(), 0
        while time.perf_counter() - t0 < window:
            torch.mm(a, a)
            n += 1
        return (time.perf_counter() - t0) / n

    rows = {}
    for nbytes in sizes:
        probe = AllreduceProbe([nbytes])  # warmed up, then one allreduce timed alone
        probe.time_each()
        x, once = probe.tensors[0], probe.wall[0][0]
        k = torch.tensor([max(1, int(window / max(once, 1e-6)))])
        dist.broadcast(k, 0)  # the same number of allreduces on every rank
        k = int(k)
        lost, beside = [], []
        for _ in range(reps):
            per_mm = clean()
            dist.barrier()
            t0, n = time.perf_counter(), 0
            for _ in range(k):
                h = dist.all_reduce(x, async_op=True)
                while not h.is_completed():
                    torch.mm(a, a)
                    n += 1
                h.wait()
            span = time.perf_counter() - t0
            lost.append((span - n * per_mm) / k)
            beside.append(span / k)
        rows[nbytes] = {"lost_s": statistics.median(lost), "beside_compute_s": statistics.median(beside),
                        "lost_all_s": lost}
    if rank == 0:
        Path(out).write_text(json.dumps(rows))
    dist.destroy_process_group()


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=4, help="ranks, pinned round robin to the CPUs (default 4)")
    p.add_argument("--sizes-mib", default="0.25,1,2,4,8,16", help="allreduce sizes in MiB (default 0.25,1,2,4,8,16)")
    p.add_argument("--reps", type=int, default=5, help="timed windows per size (default 5)")
    p.add_argument("--window", type=float, default=0.1, help="seconds per window (default 0.1)")
    args = p.parse_args(argv)
    sizes = [int(float(s) * 2**20) for s in args.sizes_mib.split(",")]
    cal = calibrate(sizes, reps=15, world=args.world_size)
    cpus = cal["host_cpus"] or 1
    per_core = ranks_per_core(args.world_size, cpus if args.world_size > cpus else 0)
    rows = run_ranks(_worker, (sizes, args.reps, args.window), args.world_size, timeout=600)
    print(f"{args.world_size} ranks on {min(cpus, args.world_size)} CPUs ({per_core} per core); "
          f"compute lost per allreduce, per rank:")
    print(f"{'MiB':>8} {'alone ms':>9} {'beside compute ms':>18} {'lost ms':>8} {'model ms':>9} {'ratio':>6}")
    table = []
    for nbytes, (_, alone), (_, cpu) in zip(sizes, cal["points"], cal["cpu_points"]):
        r = rows[str(nbytes)]
        model = per_core * cpu
        table.append({"mib": nbytes / 2**20, "alone_ms": alone * 1e3, "beside_compute_ms": r["beside_compute_s"] * 1e3,
                      "lost_ms": r["lost_s"] * 1e3, "model_ms": model * 1e3})
        print(f"{nbytes / 2**20:8.2f} {alone * 1e3:9.2f} {r['beside_compute_s'] * 1e3:18.1f} "
              f"{r['lost_s'] * 1e3:8.2f} {model * 1e3:9.2f} {r['lost_s'] / model if model else float('nan'):6.2f}")
    out = {"world_size": args.world_size, "per_core": per_core, "rows": table}
    print(json.dumps(out, separators=(",", ":")))
    return out


if __name__ == "__main__":
    main()
