"""Import time against profile length: ``ddpsim import`` must be linear in the steps it reads.

Makes the bundled H100 ResNet-50 profile (``ddpsim/samples/h100``) k times longer by repeating
its ProfilerSteps (shifted in time, their correlation ids offset), imports each and prints a
markdown table of steps, seconds and seconds per step; the goal is seconds per step about
constant (Note [A profile is indexed once] in ``ddpsim/trace/kineto.py``).

    python benchmarks/bench_import.py [--copies 1 4 8]
"""
from __future__ import annotations

import argparse
import copy
import gzip
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpsim.samples import BUNDLED_DIR  # noqa: E402
from ddpsim.trace.profile_import import import_profiles  # noqa: E402

PROFILE = BUNDLED_DIR / "h100" / "resnet50_nccl_ws1_rank0.kineto.json.gz"


def repeated(data: dict, k: int) -> tuple[dict, int]:
    """The profile with its steps repeated ``k`` times, and how many steps it holds."""
    events = data["traceEvents"]
    steps = [e for e in events if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")]
    span = max(e["ts"] + e["dur"] for e in steps) - min(e["ts"] for e in steps) + 1000
    ids = 1 + max(e.get("args", {}).get("correlation", 0) for e in events
                  if isinstance(e.get("args", {}).get("correlation", 0), int))
    out = [e for e in events]
    for r in range(1, k):
        for e in events:
            if e.get("ph") == "M" or e.get("cat") == "Trace" or "ts" not in e:
                continue
            e = copy.deepcopy(e)
            e["ts"] += r * span
            args = e.get("args")
            if isinstance(args, dict) and isinstance(args.get("correlation"), int):
                args["correlation"] += r * ids
            if isinstance(e.get("id"), int):
                e["id"] += r * ids
            if str(e.get("name", "")).startswith("ProfilerStep#"):
                e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + r * len(steps)}"
            out.append(e)
    return {**data, "traceEvents": out}, k * len(steps)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copies", type=int, nargs="+", default=[1, 4, 8], help="how many times the steps repeat")
    args = p.parse_args()
    data = json.loads(gzip.decompress(PROFILE.read_bytes()))
    print("| steps | import (s) | s per step |\n| --- | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        one = None
        for k in args.copies:
            big, steps = repeated(data, k)
            path = Path(tmp) / f"x{k}.json"
            path.write_text(json.dumps(big))
            t = time.perf_counter()
            trace = import_profiles([path])
            took = time.perf_counter() - t
            imported = len(trace.ranks[0].iterations)
            one = one or imported / k
            assert imported == one * k, f"{imported} steps imported of {steps}: each copy imports the same steps"
            print(f"| {steps} | {took:.2f} | {took / steps:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
