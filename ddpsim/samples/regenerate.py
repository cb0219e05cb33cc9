"""Re-record the bundled sample traces in ddpsim/samples/.

    python -m ddpsim.samples.regenerate [--only NAME ...]

Each sample is a real recording by ``ddpsim.record`` (gloo on this CPU machine),
kept small: few iterations and 2 ranks. File names sort in the order a learner
should meet them; the first is the dashboard's default.
"""
from __future__ import annotations

import argparse
import sys

from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record
from ddpsim.samples import BUNDLED_DIR

# name -> what to record (2 ranks; iterations: 0 = single bucket, 1 = rebuilt, then steady)
SAMPLES = {
    "01_mlp_torch_default": RecordConfig(model="mlp", iters=5),
    "02_mlp_torch_cap0.25": RecordConfig(model="mlp", iters=5, bucket_cap_mb=0.25),
    "03_shuffled_torch_default": RecordConfig(model="shuffled", iters=5),
    "04_branchy_torch_find_unused": RecordConfig(model="branchy", iters=5, find_unused_parameters=True),
    "05_convnet_torch_no_sync3": RecordConfig(model="convnet", iters=6, no_sync_every=3),
    "06_transformer_torch_default": RecordConfig(model="transformer", iters=5),
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="sample names to re-record")
    args = ap.parse_args(argv)
    names = args.only or list(SAMPLES)
    for name in names:
        if name not in SAMPLES:
            print(f"unknown sample {name!r}; known: {', '.join(SAMPLES)}", file=sys.stderr)
            return 2
        out = BUNDLED_DIR / f"{name}.json"
        trace = record(SAMPLES[name], out)
        s = trace.summary()
        print(f"{out.name}: iteration {s['iteration_time_s'] * 1e3:.1f} ms, "
              f"overlap {s['overlap_fraction']:.0%}, {out.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
