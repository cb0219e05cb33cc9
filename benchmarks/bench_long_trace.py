"""Learning a recording against its number of iterations: ``simulate --trace``'s reading and learning must
be linear in the iterations recorded.

A bundled CPU recording's last iteration repeated, its times shifted by one iteration each time, to N
iterations; for each N the seconds ``cli.simulate.load_source`` takes (loading the trace, learning its
workload: the replays it simulates cover every recorded iteration). Prints a markdown table; the goal is
the seconds per iteration about constant (a lookup by iteration number once searched the list: 4x the
iterations took 8.7x the time).

    python benchmarks/bench_long_trace.py [--iterations 200,400,800,1600]
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpsim.cli import build_parser  # noqa: E402
from ddpsim.cli.simulate import load_source  # noqa: E402
from ddpsim.samples import BUNDLED_DIR  # noqa: E402

SAMPLE = "01_mlp_torch_default"  # 2 ranks, 5 iterations, recorded here


def _shifted(o, dt: int):
    """``o`` with every absolute time (``*_ns`` but the backward's CPU time, a duration) moved by ``dt``."""
    if isinstance(o, dict):
        return {k: v + dt if k.endswith("_ns") and k != "backward_cpu_ns" and isinstance(v, int) else _shifted(v, dt)
                for k, v in o.items()}
    return [_shifted(x, dt) for x in o] if isinstance(o, list) else o


def repeated(n: int) -> dict:
    d = json.loads((BUNDLED_DIR / f"{SAMPLE}.json").read_text())
    for r in d["ranks"]:
        its = r["iterations"]
        last, span = its[-1], its[-1]["optimizer"]["end_ns"] - its[-2]["optimizer"]["end_ns"]
        its += [dict(_shifted(copy.deepcopy(last), k * span), iteration=last["iteration"] + k)
                for k in range(1, n - len(its) + 1)]
    return d


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", default="200,400,800,1600", help="trace lengths, comma-separated")
    args = p.parse_args()
    print("| iterations | seconds | ms per iteration |\n|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.iterations.split(",")):
            path = Path(tmp) / f"t{n}.json"
            path.write_text(json.dumps(repeated(n)))
            ns = build_parser().parse_args(["simulate", "--trace", str(path), "--iters", "5"])
            t = time.perf_counter()
            load_source(ns)
            s = time.perf_counter() - t
            print(f"| {n} | {s:.2f} | {s / n * 1e3:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
