"""Benchmark the What-if page's world-size slider on a GPU recording, the move a GPU user makes first.

    python benchmarks/bench_whatif_world.py [--repeats 4] [--sizes 16,32,64] [--trace NAME]

Drives the real page under Streamlit's AppTest (no browser: the page's own work, not the drawing in
Chromium, which bench_app.py times): the bundled H100 ResNet-18 recording (two ranks, gloo on CUDA
tensors), its network set to InfiniBand EDR, then the slider moved to each size in turn; each repeat
starts with empty caches, so every move simulates its what-if, its unchanged run and the 77-row sweep
(the scaling curve, cached by options, is drawn once). Prints the seconds per move (median and range
over the repeats) and the 1-minute load average: the machine is shared.
Measured 2026-11-30 on the 2-core CI VM (4 repeats): medians 4.9 s (16 ranks), 4.8 s (32) and 5.0 s
(64) a move. In one run interleaved with the planning before (every drawn rank its own actor up to 64,
sim/plan.py), 32 ranks took 0.58x as long (0.53-0.63), and 64 ranks 3.5-4.5 s where they took 11.9-12.5 s
or left the sweep to its button.
2026-12-01, three runs (--repeats 1) interleaved with the code before the sweep simulated configurations
that build the same buckets once (Note [Configurations that build the same buckets], 62 simulations for
77 rows here): a move 3.2-5.4 s against 3.7-6.2 s, too noisy on this shared machine to rank; the sweep
alone (``layout_sweep.sweep_rows`` at 16, 32 and 64 ranks, five runs interleaved) 0.83x as long
(0.72-0.89).
2026-12-01, ``--repeats 1 --trace 11_h200_resnet50_nccl_1rank --sizes 16,64,1024`` (the one-rank NCCL
recording, network InfiniBand EDR), three runs interleaved with the code before predictions whose steps
repeat exactly simulated 6 steps instead of 20 (learn/noise.steps_repeat): a move 1.8-3.1 s against
3.3-5.9 s, about 0.6-0.7x as long in every round.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/apputil.py: the app under AppTest with traces uploaded

import streamlit as st  # noqa: E402

from apputil import with_uploads  # noqa: E402
from ddpsim import load_trace, samples  # noqa: E402


def one_repeat(name: str, sizes: list[int]) -> list[float]:
    """Seconds per move of the world-size slider to each of ``sizes``, from empty caches."""
    st.cache_data.clear()
    st.cache_resource.clear()
    at = with_uploads({name: load_trace(samples.sample_path(name))}, "whatif.py", name)
    at = next(s for s in at.selectbox if s.label == "Network").set_value("ib100").run()
    out = []
    for ws in sizes:
        t = time.perf_counter()
        at = next(s for s in at.select_slider if s.label.startswith("World size")).set_value(ws).run()
        out.append(time.perf_counter() - t)
        if at.exception or at.error:
            raise SystemExit(f"the page failed at {ws} ranks: {[e.value for e in at.error] or at.exception}")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--sizes", default="16,32,64", help="world sizes, moved to in turn")
    ap.add_argument("--trace", default="10_h100_resnet18_gloo_2ranks", help="a bundled sample's name")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    runs = [one_repeat(args.trace, sizes) for _ in range(args.repeats)]
    result = {"trace": args.trace, "load_1min": os.getloadavg()[0], "moves": {}}
    for i, ws in enumerate(sizes):
        secs = [r[i] for r in runs]
        result["moves"][ws] = {"median_s": statistics.median(secs), "min_s": min(secs), "max_s": max(secs)}
        print(f"{ws:>6} ranks: {statistics.median(secs):.2f} s a move (range {min(secs):.2f}-{max(secs):.2f} s)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
