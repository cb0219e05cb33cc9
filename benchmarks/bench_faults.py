"""Fault injection for the report: SIGKILL / SIGSTOP a random rank during start-up and training.

    .venv/bin/python benchmarks/bench_faults.py [--trials 20] [--timeout 10] [--world-size 2]

Each trial records a real run (tests/faultinject.py), signals one random rank, and
checks: the rank named in the error, every process gone within timeout + 5 s of
the fault, the partial trace kept and marked. Prints one row per trial and a tally.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from faultinject import trial  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--timeout", type=float, default=10.0, help="the recording's --timeout, seconds")
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    kinds = itertools.cycle([(s, w) for s in ("SIGKILL", "SIGSTOP") for w in ("start-up", "training")])
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.trials):
            sig, when = next(kinds)
            r = trial(tmp, sig, when, seed=args.seed + n, timeout_s=args.timeout, world_size=args.world_size,
                      pin_cpus=True)
            results.append(r)
            print(f"{n:2d} {r.signal:7s} {r.when:8s} victim {r.victim} named {r.named} "
                  f"gone {r.seconds_to_gone:5.2f}s kept {r.trace_kept} marked {bool(r.victim_marked)} "
                  f"{'OK' if r.ok(args.timeout) else 'FAIL'} | {r.message[:150]}", flush=True)
    ok = sum(r.ok(args.timeout) for r in results)
    for sig in ("SIGKILL", "SIGSTOP"):
        times = [r.seconds_to_gone for r in results if r.signal == sig]
        if times:
            print(f"{sig}: gone in {min(times):.2f}-{max(times):.2f} s (median {statistics.median(times):.2f}), "
                  f"limit {args.timeout + 5:.0f} s")
    print(f"{ok}/{len(results)} trials: rank named, all gone within timeout + 5 s, partial trace kept and marked")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
