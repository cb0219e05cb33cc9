"""Parse time against input size: the strict reader (``ddpsim.load_trace``) must be linear.

Two kinds of input: a file that ends inside a string of escaped quotes (the pre-scan's worst
case) and valid traces made by repeating a bundled simulated sample's rank. Prints a
markdown table of sizes and seconds; the goal is the 40,000-pair case under 0.2 s and the
seconds per MB about constant.

    python benchmarks/bench_reader.py [--max-ranks 600]
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

from ddpsim.samples import BUNDLED_DIR  # noqa: E402
from ddpsim.trace import TraceFormatError, load_trace  # noqa: E402


def timed(path: Path) -> float:
    t = time.perf_counter()
    try:
        load_trace(path)
    except TraceFormatError:
        pass
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--max-ranks", type=int, default=600, help="the largest valid trace, in repeated ranks")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.json"
        for n in (10_000, 40_000, 160_000, 640_000, 2_560_000):
            path.write_text('{"meta": {"model": "' + '\\"' * n)
            rows.append((f"ends inside {n:,} escaped quotes", path.stat().st_size, timed(path)))
        base = json.loads((BUNDLED_DIR / "24_sim_bert-large_a100-eth100_w64_default.json").read_text())
        for k in sorted({10, 60, 250, args.max_ranks}):
            d = copy.deepcopy(base)
            d["ranks"] = [dict(copy.deepcopy(base["ranks"][0]), rank=i) for i in range(k)]
            d["meta"]["world_size"] = max(d["meta"].get("world_size", 1), k)
            path.write_text(json.dumps(d))
            rows.append((f"valid trace, {k} ranks", path.stat().st_size, timed(path)))
    print("| input | size | seconds | seconds per MB |\n|---|---|---|---|")
    for name, size, s in rows:
        print(f"| {name} | {size / 1e6:.2f} MB | {s:.3f} | {s / (size / 1e6):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
