"""``python -m ddpsim sweep``: simulate a grid of DDP configurations, mark the best.

    python -m ddpsim sweep --arch resnet50 --hardware a100-ib200 --world-size 8,64 \\
        --bucket-cap-mb 1,5,25,100 --order torch,definition --out table.csv
    python -m ddpsim sweep --trace real.json --bucket-cap-mb 0.25,1,25 --out table.json

Grid flags take comma-separated values; every combination is simulated. The table
(CSV or JSON by the --out suffix) has one row per configuration with ``rank``
and ``best``. The last line on stdout is the best row as one JSON object.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from ddpsim.cli.simulate import (add_budget_arguments, add_input_arguments, add_network_source_arguments,
                                 load_source, parse_stragglers)
from ddpsim.sim.archs import arch_defaults
from ddpsim.errors import CLIError

HELP = "simulate a grid of DDP configurations (bucket cap, order, world size, network...) and mark the best"

GRID = {  # flag -> (SimConfig field, parser of one value)
    "world_size": int, "bucket_cap_mb": float, "first_bucket_cap_mb": float, "order": str,
    "no_sync_every": int, "bandwidth_gbps": float, "latency_us": float, "algo": str, "jitter": float,
    "concurrency": int, "interference": float,
}


def add_arguments(p) -> None:
    add_input_arguments(p)
    g = p.add_argument_group("grid (comma-separated values)")
    for name in GRID:
        g.add_argument("--" + name.replace("_", "-"), metavar="V1,V2,...")
    f = p.add_argument_group("fixed options")
    f.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=None)
    f.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=None)
    f.add_argument("--naive", action="store_true", help="per-parameter allreduce after backward")
    f.add_argument("--overlap", action="store_true", help="per-parameter allreduce from each gradient's hook")
    f.add_argument("--iters", type=int, default=None, help="synced steps per configuration (default: --trace at "
                   "its world size, as many as were recorded; otherwise 20 (--trace) or 4 (--arch))")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--straggler", action="append", default=[], metavar="RANK:FACTOR")
    add_network_source_arguments(p)
    add_budget_arguments(p)
    p.add_argument("--metric", default="iteration_time_s",
                   choices=["iteration_time_s", "exposed_comm_s", "overlap_fraction"])
    p.add_argument("--out", help="table.csv or table.json")


def fixed_options(args) -> dict:
    """The SimConfig fields the command line fixes for every row."""
    base = {"seed": args.seed, **({"iters": args.iters} if args.iters is not None else {})}
    for k in ("max_events", "time_limit_s", "find_unused_parameters", "static_graph", "hardware"):
        if getattr(args, k) is not None:
            base[k] = getattr(args, k)
    if args.naive:
        base["naive"] = True
    if args.overlap:
        base["overlap"] = True
    strag = parse_stragglers(args.straggler)
    if strag:
        base["stragglers"] = strag
    return base


def parse_grid(args) -> dict:
    grid = {}
    for name, conv in GRID.items():
        raw = getattr(args, name, None)
        if raw is None:
            continue
        try:
            grid[name] = [conv(v.strip()) for v in str(raw).split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"--{name.replace('_', '-')}: cannot read {raw!r} as a list of "
                             f"{conv.__name__} values") from None
        if not grid[name]:
            raise ValueError(f"--{name.replace('_', '-')} needs at least one value")
    return grid


def main(args) -> int:
    from ddpsim.analysis.unused import needs_find_unused
    from ddpsim.learn import sweep as learn_sweep
    from ddpsim.sim.api import SimConfig
    from ddpsim.sim.sweep import sweep, to_csv

    grid = parse_grid(args)
    base = fixed_options(args)
    workload, trace = load_source(args, grid.get("world_size", []))
    if trace is not None and base.get("find_unused_parameters") is False and \
            (why := needs_find_unused(trace, False, bool(base.get("static_graph")))):
        raise CLIError(f"--no-find-unused-parameters: {why}")
    if trace is not None:
        rows = learn_sweep(workload, grid, base, metric=args.metric, trace=trace)
    else:
        hook = base.get("comm_hook") or grid.get("comm_hook")  # a GPU model prices a hook at its rates
        cfg = SimConfig(**{"iters": 4, **arch_defaults(workload, hook, base.get("powersgd_rank")), **base})
        if "world_size" not in grid:
            cfg.validate()
        rows = sweep(workload, grid, cfg, metric=args.metric)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(rows, indent=1) if out.suffix == ".json" else to_csv(rows))
    cols = list(grid) + ["iteration_time_s", "exposed_comm_s", "overlap_fraction", "n_buckets", "best"]
    print("  ".join(f"{c:>16}" for c in cols))
    for r in rows:
        print("  ".join(f"{(f'{r[c]:.6g}' if isinstance(r[c], float) else str(r[c])):>16}" for c in cols))
    best = next(r for r in rows if r["best"])
    print(json.dumps(best, separators=(",", ":")))
    return 0
