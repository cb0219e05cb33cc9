"""``python -m ddpsim validate``: compare the simulator's prediction with a measurement.

    python -m ddpsim validate --trace real.json
        simulate the recorded run itself (its own options) and compare.
    python -m ddpsim validate --trace real_25mb.json --against real_1mb.json
        learn the workload from the first run, simulate the second run's options
        (bucket cap, find_unused_parameters, static_graph, no_sync_every, world
        size) and compare with the second run's measurement: a real prediction.
    python -m ddpsim validate --grid [--models mlp,transformer,shuffled] [--world-sizes 2,4]
            [--caps 0.25,default] [--orders torch,definition] [--find-unused off,on] --out table
        for each model and world size: record ONE calibration run (torch DDP with
        ``--calibration-cap`` MiB buckets, a cap that is not on the grid) and learn the
        workload, the ranks' speeds and the rank noise (jitter) from it, with the
        allreduce cost timed in its ranks between iterations; then record
        every grid configuration (never used for calibration), simulate it from the
        calibration workload with the same options, and print predicted against
        measured iteration time with the error, and the per-bucket launch-time error
        (the largest |predicted - measured| bucket launch time after the iteration
        start, as % of the measured iteration time). Orderings other than torch's
        are recorded with ddpsim's minddp (``--order``, not in torch). Ends with
        the median and max absolute errors; ``--out X`` writes X.csv and X.json.
        The grid's recording and table are in ``grid.py``, the comparison in ``compare.py``.
    python -m ddpsim validate --extrapolate [--from-world-size 2] [--world-sizes 4] [grid flags]
        learn each model at world size 2 (the grid's calibration run) plus ``ddpsim
        calibrate``'s allreduce microbenchmark at 2 and 4 ranks, and predict the grid
        recorded at 4 ranks (``extrapolate.py``). With --against at another world
        size, --trace's calibration (or --calibration FILE) gives the target's network.

For iteration_time_s, exposed_comm_s and overlap_fraction it prints predicted,
measured and the relative error; the last stdout line is one JSON object.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ddpsim.experiments.compare import METRICS, parse_jitter
from ddpsim.learn.extract import DRAWN_ITERS, STEADY_ITERS
from ddpsim.learn.jitter import pick_jitter
from ddpsim.sim.budget import LIMITS
from ddpsim.trace import save_trace
from ddpsim.trace.writer import refuse_empty, refuse_unwritable

HELP = "compare simulated and measured iteration time (one trace pair, or a recorded --grid of configurations)"


def add_arguments(p) -> None:
    from ddpsim.experiments import extrapolate, grid

    p.add_argument("--trace", help="recorded trace to learn the workload from")
    p.add_argument("--against", help="recorded trace whose options are predicted (default: --trace)")
    p.add_argument("--iters", type=int, default=None, help="synced steps to simulate (default: as many as "
                   f"were recorded, at the recorded world size; else {DRAWN_ITERS}, or {STEADY_ITERS} where they repeat; "
                   "--grid 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jitter", help="rank noise: a number, 'fit' (fitted so the learnt-from run predicts "
                   "itself, see fit_jitter) or, by default, the variation of compute measured in the run "
                   "learnt from (--grid: each calibration run)")
    p.add_argument("--out", help="write the simulated trace here (--grid, --extrapolate: the table to OUT.csv and "
                                 "OUT.json)")
    g = p.add_argument_group("--grid: record a grid of real runs and predict each")
    g.add_argument("--grid", action="store_true", help="record and predict a grid of configurations")
    g.add_argument("--models", default="mlp,transformer,shuffled", help="zoo models, comma-separated")
    g.add_argument("--world-sizes", default=None, help="comma-separated (default 2,4; --extrapolate: the "
                   "world sizes predicted, default 4)")
    g.add_argument("--caps", default="0.25,default", help="bucket_cap_mb values; 'default' = torch's")
    g.add_argument("--orders", default="torch,definition",
                   help="torch (torch DDP), or reverse/definition (minddp --order; ddpsim.buckets.BucketOrder)")
    g.add_argument("--find-unused", default="off,on", help="find_unused_parameters values: off,on")
    g.add_argument("--calibration-cap", type=float, default=grid.CALIBRATION_CAP_MB, metavar="MIB",
                   help=f"bucket_cap_mb of the calibration run; must not be one of --caps "
                        f"(default {grid.CALIBRATION_CAP_MB:g})")
    g.add_argument("--record-iters", type=int, default=None,
                   help=f"iterations per recorded run (default {grid.RECORD_ITERS}: an iteration varies by +-20%% "
                        "here, and the median of ~38 steady ones is then good to ~3%%; --extrapolate: "
                        f"{extrapolate.RECORD_ITERS} in each launch)")
    g.add_argument("--workdir", help="keep the recorded traces here (default: a temporary folder)")
    g.add_argument("--reuse", action="store_true",
                   help="predict from the traces already in --workdir (required) instead of recording them "
                        "again (--grid records the groups missing there, but refuses a folder holding none of them; "
                        "--extrapolate needs them all)")
    g.add_argument("--wait-load", type=float, default=None, metavar="L",
                   help="before recording, wait until the 1-minute load average is below L")
    g.add_argument("--wait-max-s", type=float, default=1200.0, help="give up waiting after this long")
    e = p.add_argument_group("--extrapolate: learn at one world size, predict the grid at others (extrapolate.py)")
    e.add_argument("--extrapolate", action="store_true",
                   help="record the grid at --from-world-size and at --world-sizes; predict the latter from the "
                        "former's calibration run and the allreduce microbenchmark (ddpsim calibrate)")
    e.add_argument("--from-world-size", type=int, default=2, help="world size learnt from (default 2)")
    e.add_argument("--launches", type=int, default=extrapolate.LAUNCHES,
                   help=f"launch every world size's runs this many times and pool them (default "
                        f"{extrapolate.LAUNCHES}: a launch "
                        "draws a speed of its own; Note [Pool launches] in extrapolate.py)")
    p.add_argument("--no-calibrate", action="store_true",
                   help="--against at another world size, a CPU trace recorded here: do not measure the "
                        "allreduce at it (the prediction then carries no measurement at that size)")
    p.add_argument("--calibration", metavar="FILE",
                   help="the network at other world sizes: `ddpsim calibrate --world-sizes ... --save FILE` "
                        "(or a trace holding meta.calibration); default: the --trace's own")


def validate(source, target=None, iters: int | None = None, seed: int = 0, jitter=None) -> dict:
    """Learn from ``source`` (``ddpsim.learn.learn``), simulate ``target``'s options (default: the
    source's own: a replay) and compare with ``target``'s measurement.

    The same function and defaults as ``simulate --trace`` (``replay_config``): the recorded
    ranks' speeds over the recorded steps at the recorded world size, else a drawn noise of
    the measured spread over 20 steps. ``jitter``: a number or ``"fit"`` draws that noise instead.
    """
    from ddpsim.analysis import spread, summarize
    from ddpsim.learn import learn, replay_config
    from ddpsim.sim.api import simulate

    target = target or source
    if target.source != "real":
        raise ValueError("validate compares against a recorded (source real) trace")
    w = learn(source)
    fields = {"seed": seed, **({"iters": iters} if iters else {})}
    if jitter not in (None, "recorded"):
        fields["jitter"] = pick_jitter(jitter, w, source, iters or DRAWN_ITERS)
    cfg = replay_config(w, target, **fields)
    trace, predicted = simulate(w, cfg)
    measured = summarize(target)
    rows = {}
    for m in METRICS:
        p, r = predicted[m], measured[m]
        rows[m] = {"predicted": p, "measured": r, "rel_error": (p - r) / r if r else None}
    return {"metrics": rows, "config": {k: v for k, v in cfg.__dict__.items() if k != "stragglers"},
            "workload": w.meta, "trace": trace, "spread": spread(target)["iteration_time_s"]}


def check_modes(args) -> None:
    """One line for flags that --grid or --extrapolate would ignore, before the first recording:
    each records its own runs and learns the network from them (--extrapolate: or --calibration)."""
    mode = "--extrapolate" if args.extrapolate else "--grid"
    for flag, given in (("--grid", args.grid and args.extrapolate), ("--trace", args.trace),
                        ("--against", args.against), ("--no-calibrate", args.no_calibrate)):
        if given:
            raise ValueError(f"{mode} and {flag} conflict: {mode} records its own runs and predicts them "
                             f"(drop {flag})")
    if args.calibration and not args.extrapolate:
        raise ValueError("--grid and --calibration conflict: --grid learns the network from each group's own "
                         "calibration run (--calibration serves --trace/--against and --extrapolate)")


def check_out(out: str, table: bool) -> None:
    """One line for an --out that cannot be written, before any work (a grid records for minutes, then
    wrote nowhere). ``table``: --out is OUT.csv and OUT.json (``table.table_paths``)."""
    from ddpsim.experiments.table import table_paths

    for path in table_paths(out) if table else [Path(out)]:
        refuse_unwritable(path, "--out", out)


def main(args) -> int:
    from ddpsim.experiments import grid
    from ddpsim.trace import load_trace

    for flag, value in (("--iters", args.iters), ("--record-iters", args.record_iters)):
        if value is not None and value < 1:  # given: checked, never replaced by a default
            raise ValueError(f"{flag} must be at least 1, not {value}")
    if args.iters is not None and args.iters > LIMITS["iters"][1]:  # checked before --grid records anything
        raise ValueError(f"--iters must be at most {LIMITS['iters'][1]:,} {LIMITS['iters'][2]}, not {args.iters}")
    refuse_empty(args.out, "--out")  # --grid's OUT.csv would be a hidden .csv here
    if args.grid or args.extrapolate:
        check_modes(args)
    if args.out:
        check_out(args.out, table=args.grid or args.extrapolate)
    if args.extrapolate:
        from ddpsim.experiments.extrapolate import RECORD_ITERS, main_extrapolate
        args.record_iters = RECORD_ITERS if args.record_iters is None else args.record_iters
        return main_extrapolate(args)
    if args.grid:
        args.world_sizes = "2,4" if args.world_sizes is None else args.world_sizes
        args.record_iters = grid.RECORD_ITERS if args.record_iters is None else args.record_iters
        return grid.main_grid(args)
    if not args.trace:
        raise ValueError("give --trace FILE (and optionally --against FILE), --grid or --extrapolate")
    source = load_trace(args.trace)
    if args.calibration:  # Note [Ranks that share cores slow the ring]: the target world size's network
        from ddpsim.experiments.calibrate import load_calibration
        source.meta["calibration"] = load_calibration(args.calibration)
    target = load_trace(args.against) if args.against else source
    if target.source != "real":  # before any calibration: validate() refuses it anyway
        raise ValueError(f"{args.against or args.trace} is a {target.source} trace: validate compares against a "
                         "recorded (source real) one")
    if target.world_size != source.world_size and not args.calibration:
        from ddpsim.experiments import worldsize  # Note [Another world size on the user's path]
        worldsize.prepare(source, target.world_size, calibrate=not args.no_calibrate,
                          log=lambda msg: print(msg, file=sys.stderr, flush=True))
    res = validate(source, target, args.iters, args.seed, parse_jitter(args.jitter))
    trace = res.pop("trace")
    if args.out:
        save_trace(trace, args.out)
    spread = res["spread"]
    for m, r in res["metrics"].items():
        err = "n/a" if r["rel_error"] is None else f"{r['rel_error'] * 100:+.1f}%"
        noise = (f"  (the run's steady iterations vary +-{spread['rel'] * 100:.0f}% over {spread['n']})"
                 if m == "iteration_time_s" else "")
        print(f"{m:18} predicted {r['predicted']:.6g}  measured {r['measured']:.6g}  error {err}{noise}")
    print(json.dumps({m: r for m, r in res["metrics"].items()}, separators=(",", ":")))
    return 0
