"""What forking CPU ranks saves: a short recording with its ranks forked from a server that imported
torch (ddpsim/record/forked.py) against the same recording with each rank started as
``python -m ddpsim.record.worker``, interleaved in one process.

    .venv/bin/python benchmarks/bench_rank_start.py [--pairs 8] [--world-size 2] [--iters 3]

Each pair records the zoo's mlp once each way, in turn (which goes first alternates); the first
forked recording, which starts the server, is timed apart. Prints the wall time of each way
(median, p10, p90), and the started/forked ratio per pair (median, min, max).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import ddpsim.record.launcher as launcher
from ddpsim.record.config import RecordConfig


def timed(cfg: RecordConfig, out: Path, forked: bool) -> float:
    start_rank = launcher.start_rank
    if not forked:
        launcher.start_rank = lambda *args: None  # the launcher then starts `python -m ddpsim.record.worker`
    try:
        t0 = time.perf_counter()
        launcher.record(cfg, out)
        return time.perf_counter() - t0
    finally:
        launcher.start_rank = start_rank


def spread(xs: list[float]) -> str:
    q = statistics.quantiles(xs, n=10) if len(xs) > 1 else xs * 9
    return f"median {statistics.median(xs):.2f} s (p10 {q[0]:.2f}, p90 {q[-1]:.2f})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=8)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--iters", type=int, default=3)
    args = p.parse_args()
    cfg = RecordConfig(model="mlp", world_size=args.world_size, iters=args.iters)
    with tempfile.TemporaryDirectory() as tmp:
        first = timed(cfg, Path(tmp) / "first.json", forked=True)
        forked, started = [], []
        for n in range(args.pairs):
            for way in ((True, False) if n % 2 else (False, True)):
                (forked if way else started).append(timed(cfg, Path(tmp) / f"run{n}{way}.json", forked=way))
    ratios = [s / f for s, f in zip(started, forked)]
    print(f"mlp, {args.world_size} ranks, {args.iters} iterations, {args.pairs} interleaved pairs")
    print(f"first forked recording (starts the server): {first:.2f} s")
    print(f"forked:  {spread(forked)}")
    print(f"started: {spread(started)}")
    print(f"started/forked per pair: median {statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
