"""Clock alignment time against the number of ranks: ``profile_meta.align`` must be about linear.

Three made-up jobs of N ranks, each rank 3 steps of 3 bucket allreduces (the shape of
``tests/test_clock_align.py``'s ``_rank``), each on its own clock (rank r's r us ahead):
``chain``, rank r profiled steps r and r+1, so each rank shares allreduces with its neighbours only
and the offsets reach the last rank through all the others; ``lone``, every other rank without
allreduces, placed alone against the rest; ``pairs``, ranks 2p and 2p+1 profiled step p only, so the
job is N/2 groups of two, each on its own clock and placed against the first. Prints a markdown table of ranks, seconds and
microseconds per rank; the goal is microseconds per rank about constant.

    python benchmarks/bench_clock_align.py [--ranks 500 1000 2000]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpsim.trace.clock_align import END  # noqa: E402
from ddpsim.trace.profile_meta import align  # noqa: E402

MS = 1_000_000


def rank(r: int, steps: range, allreduces: bool = True) -> dict:
    """Rank ``r``'s iterations as the import has them before ``align``, on a clock r us ahead."""
    its = []
    for s in steps:
        t = s * 100 * MS + r * 1000
        buckets = [{"bucket": k, "bytes": 4 << 20, "launch_ns": t + (40 + 10 * k) * MS,
                    "complete_ns": t + (70 + 5 * k) * MS,
                    **({END: t + (70 + 5 * k) * MS} if allreduces else {})} for k in range(3)]
        its.append({"iteration": s, "sync": True, "forward": {"start_ns": t, "end_ns": t + 30 * MS},
                    "backward": {"start_ns": t + 30 * MS, "end_ns": t + 85 * MS}, "buckets": buckets,
                    "optimizer": {"start_ns": t + 85 * MS, "end_ns": t + 90 * MS}})
    return {"rank": r, "clock_offset_ns": 0, "iterations": its}


def job(kind: str, n: int) -> list[dict]:
    if kind == "chain":
        return [rank(r, range(r, r + 2)) for r in range(n)]
    if kind == "pairs":
        return [rank(r, range(r // 2, r // 2 + 1)) for r in range(n)]
    return [rank(r, range(3), allreduces=r % 2 == 0) for r in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[500, 1000, 2000])
    args = ap.parse_args()
    print("| job | ranks | seconds | us per rank |\n|---|---|---|---|")
    for kind in ("chain", "lone", "pairs"):
        for n in args.ranks:
            ranks = job(kind, n)
            t0 = time.perf_counter()
            align(ranks)
            dt = time.perf_counter() - t0
            print(f"| {kind} | {n} | {dt:.3f} | {dt / n * 1e6:.0f} |", flush=True)


if __name__ == "__main__":
    main()
