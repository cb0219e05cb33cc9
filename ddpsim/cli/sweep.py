"""``python -m ddpsim sweep``: simulate a grid of DDP configurations, mark the best.

    python -m ddpsim sweep --trace real.json            # the What-if page's sweep (77 configurations)
    python -m ddpsim sweep --arch resnet50 --hardware a100-ib200 --world-size 8,64 \\
        --bucket-cap-mb 1,5,25,100 --order torch,definition --out table.csv
    python -m ddpsim sweep --trace real.json --bucket-cap-mb 0.25,1,25 --out table.json

Grid flags take comma-separated values; every combination is simulated. Without a bucket-layout
flag (--bucket-cap-mb, --first-bucket-cap-mb, --order, --last-bucket-small) the layouts are the
What-if page's (``ddpsim.learn.layout_sweep``, the same code): torch's default cap and 0.25-250 MiB
x torch, definition and random orderings x find_unused_parameters off and on, and torch's ordering
with find_unused off once more with DDP_SET_LAST_BUCKET_CAP=1; over any other grid flag. Rows are
ranked as the page ranks them (among rows as good: torch's ordering, then find_unused_parameters
off, then no environment variable). The table (CSV or JSON by the --out suffix) has one row per
configuration with ``rank`` and ``best``. The best row is printed in words (an environment variable
named as such; "no best" where every row simulates alike; an ordering torch never builds named as
such, beside torch's ordering's best; PowerSGD on gloo's caution on a line of its own), then, as
the last line on stdout, as one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ddpsim.cli.progress import progress_bar
from ddpsim.cli.sim_args import add_budget_arguments, add_input_arguments, add_network_source_arguments
from ddpsim.cli.simulate import FLAGS, config_for, load_source, parse_stragglers
from ddpsim.sim.archs import arch_defaults
from ddpsim.sim.sweep import to_csv
from ddpsim.errors import CLIError
from ddpsim.trace.writer import write_text

HELP = "simulate a grid of DDP configurations (bucket cap, order, world size, network...) and mark the best"
EPILOG = ("Without --bucket-cap-mb, --first-bucket-cap-mb, --order or --last-bucket-small it runs the What-if page's "
          "sweep: torch's default cap and 0.25-250 MiB x orders torch, definition, random x find_unused_parameters "
          "off and on (one of them with --[no-]find-unused-parameters), and torch's ordering with find_unused off "
          "also with DDP_SET_LAST_BUCKET_CAP=1 (77 configurations per value of the other grid flags). The best row "
          "(among rows as good: torch's ordering, then find_unused_parameters off) is printed in words ('no best' "
          "where all simulate alike), then as JSON on the last line.")
LAYOUT = ("bucket_cap_mb", "first_bucket_cap_mb", "order", "last_bucket_small")  # given: the grid as given


def cap(value: str) -> float | None:
    """A bucket cap in MiB; ``default``: torch's (25 MiB, first bucket 1 MiB), as the table prints it."""
    return None if value == "default" else float(value)


def boolean(value: str) -> bool:
    """``on``/``off`` (true/false, 1/0, yes/no) as a bool; a ValueError otherwise."""
    v = value.lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise ValueError(value)


KIND = {cap: "MiB (or default)", boolean: "off/on"}  # what a value is, in an error; else its type's name
GRID = {  # flag -> (SimConfig field, parser of one value)
    "world_size": int, "bucket_cap_mb": cap, "first_bucket_cap_mb": cap, "order": str,
    "no_sync_every": int, "bandwidth_gbps": float, "latency_us": float, "algo": str, "jitter": float,
    "concurrency": int, "interference": float, "last_bucket_small": boolean,
}


def add_arguments(p) -> None:
    p.epilog = EPILOG
    add_input_arguments(p)
    g = p.add_argument_group("grid (comma-separated values)")
    for name in GRID:
        g.add_argument("--" + name.replace("_", "-"), metavar="V1,V2,...", help=(
            "off,on: torch's DDP_SET_LAST_BUCKET_CAP=1 (SimConfig.last_bucket_small)" if name == "last_bucket_small" else
            "MiB, or default: torch's" if name.endswith("bucket_cap_mb") else None))
    f = p.add_argument_group("fixed options")
    f.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=None,
                   help="fix it (default: the What-if page's sweep tries both; a grid given, as recorded or off)")
    f.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=None)
    f.add_argument("--naive", action=argparse.BooleanOptionalAction, default=None,
                   help="per-parameter allreduce after backward")
    f.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="per-parameter allreduce from each gradient's hook")
    f.add_argument("--iters", type=int, default=None, help="synced steps per configuration (default: --trace at "
                   "its world size, as many as were recorded; otherwise 20 (--trace), a SIMULATED trace of a GPU "
                   "model's own or 4 (--arch))")
    f.add_argument("--seed", type=int, help="default: a SIMULATED trace of a GPU model's own, otherwise 0")
    f.add_argument("--straggler", action="append", default=[], metavar="RANK:FACTOR",
                   help="given, they replace a SIMULATED trace's stragglers")
    add_network_source_arguments(p)
    add_budget_arguments(p)
    p.add_argument("--metric", default="iteration_time_s",
                   choices=["iteration_time_s", "exposed_comm_s", "overlap_fraction"])
    p.add_argument("--out", help="table.csv or table.json")


def fixed_options(args) -> dict:
    """The SimConfig fields the command line fixes for every row."""
    base = {}
    for k in ("seed", "iters", "max_events", "time_limit_s", "find_unused_parameters", "static_graph", "hardware",
              "naive", "overlap"):
        if getattr(args, k) is not None:
            base[k] = getattr(args, k)
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
        if any(not v.strip() for v in str(raw).split(",")):  # "1,,5": refused, not read as 1,5
            raise ValueError(f"--{name.replace('_', '-')} has an empty value in {raw!r}: give values separated by "
                             "single commas")
        try:
            grid[name] = [conv(v.strip()) for v in str(raw).split(",")]
        except ValueError:
            raise ValueError(f"--{name.replace('_', '-')}: cannot read {raw!r} as a list of "
                             f"{KIND.get(conv, conv.__name__)} values") from None
        if not grid[name]:
            raise ValueError(f"--{name.replace('_', '-')} needs at least one value")
    return grid


def main(args) -> int:
    from ddpsim.analysis.unused import refusal
    from ddpsim.learn import layout_sweep, sweep

    grid = parse_grid(args)
    base = fixed_options(args)
    workload, trace, model = load_source(args, grid.get("world_size", []), precheck=prechecked(args, grid, base))
    needs_fu = None  # why find_unused_parameters must stay on (ddpsim/analysis/unused.py)
    if (refused := refusal(trace, False, bool(base.get("static_graph")))):
        option, why = refused
        if option == "static_graph=True" or base.get("find_unused_parameters") is False:
            raise CLIError(f"{FLAGS[option]}: {why}")  # every row would fail in torch
        needs_fu = why
    if trace is None:  # a GPU model: a SIMULATED trace's options under the flags given (GpuModel.settings)
        base = arch_config(workload, grid, model.settings(base) if model else base,
                           model.carried({**base, **grid}) if model else [], args.trace)
    show = progress_bar("simulating", "configurations")  # on a terminal only
    if any(k in grid for k in LAYOUT):  # the grid as given, ranked as the page ranks
        rows, notes = layout_sweep.rank(sweep(workload, grid, base, args.metric, trace=trace, progress=show),
                                        args.metric), []
    else:  # the What-if page's layouts, over the other grid flags
        fu = [args.find_unused_parameters] if args.find_unused_parameters is not None else [False, True]
        rows, notes = layout_sweep.sweep_rows(workload, base, trace, find_unused=fu, grid=grid,
                                                  metric=args.metric, needs_fu=needs_fu, progress=show)
    for note in notes:
        print(f"not in the sweep: {note}", file=sys.stderr)
    if args.out:
        out = Path(args.out)
        json_out = out.name.removesuffix(".gz").endswith(".json")
        write_text(json.dumps(rows, indent=1) if json_out else to_csv(rows), out)  # whole; .gz: gzipped
    print_table(rows)
    best = layout_sweep.recommend(rows)
    print(layout_sweep.describe_best(best, rows, args.metric))
    if trace is not None:  # PowerSGD on gloo: the run's backend, the hook swept, find_unused as run unless given
        recorded = trace.meta.get("options") or {}
        fu = base.get("find_unused_parameters", recorded.get("find_unused_parameters"))
        if (caution := layout_sweep.powersgd_on_gloo(best, rows, trace.meta.get("backend"),
                                                     base.get("comm_hook") or recorded.get("comm_hook"), bool(fu))):
            print(caution)
        if best is not None and all({**base, **best}.get(k) is None for k in ("bandwidth_gbps", "hardware")):
            if (far := layout_sweep.beyond_fitted_sizes(best.get("bucket_cap_mb", base.get("bucket_cap_mb")),
                                                        workload, trace)):  # the recording's own allreduce line
                print(far)
    print(json.dumps(best, separators=(",", ":")))
    return 0


def prechecked(args, grid: dict, base: dict):
    """``load_source``'s precheck (before a measurement at a new world size: simulate.learn_trace): each value
    of each grid flag over ``base`` and the grid's first values, as the sweep builds them; a refusal there
    ends the sweep after the measurement anyway."""
    def precheck(workload, recording) -> None:
        first = {k: v[0] for k, v in grid.items()}
        for key, values in grid.items():
            for v in values:
                config_for(workload, recording, {**base, **first, key: v}, None, args.trace)
    return precheck


def arch_config(workload, grid: dict, base: dict, carried: list[str] = (), source: str | None = None):
    """The SimConfig every row of an --arch sweep starts from: the GPU model's defaults, then ``base``; checked
    at each world size of the grid, a refusal caused by an option ``carried`` from a SIMULATED trace
    (``source``) naming it (``gpu_model.checked``)."""
    from ddpsim.learn import gpu_model
    from ddpsim.sim.api import SimConfig

    def make(fields):
        return gpu_model.make_config(workload, fields, {"iters": 4})
    for world in grid.get("world_size", [None]):
        gpu_model.checked(base if world is None else {**base, "world_size": world}, make, list(carried), source, GRID)
    return SimConfig(**{"iters": 4, **arch_defaults(workload, base.get("comm_hook"), base.get("powersgd_rank")), **base})


def _cell(col: str, v) -> str:
    if v is None and col.endswith("bucket_cap_mb"):
        return "default"  # torch's: 25 MiB, first bucket 1 MiB
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def print_table(rows: list[dict]) -> None:
    """The rows as columns: the swept fields, the metrics, n_buckets, best."""
    metrics = ["iteration_time_s", "exposed_comm_s", "overlap_fraction", "n_buckets"]
    cols = [c for c in rows[0] if c not in (*metrics, "rank", "best")] + metrics + ["best"]
    width = {c: max(12, len(c)) for c in cols}
    print("  ".join(f"{c:>{width[c]}}" for c in cols))
    for r in rows:
        print("  ".join(f"{_cell(c, r[c]):>{width[c]}}" for c in cols))
