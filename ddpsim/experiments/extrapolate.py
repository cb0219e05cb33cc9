"""``python -m ddpsim validate --extrapolate``: learn at one world size, predict the grid at others.

For each model:

1. the grid's group (``recorder.Recorder``: a calibration run and the grid runs,
   interleaved) at ``--from-world-size`` and at every target world size, all
   launched at once and taking turns round by round (Note [Take turns across world
   sizes] in ``ddpsim/record/turns.py``), so that a slow spell of the machine falls
   on the source and the targets alike; ``--launches`` times, pooled (Note [Pool
   launches]);
2. ``ddpsim calibrate``'s allreduce microbenchmark at the source and every target
   world size, in fresh processes pinned as the recorder pins ranks
   (``calibrate.calibrate_world_sizes``): the network model
   (``ddpsim.sim.netmodel``, Note [Ranks that share cores slow the ring]);
3. the workload learnt from the source group's calibration run alone, exactly as
   ``--grid`` learns it (``grid.learn``), with the network model moved to the level
   of the allreduces the source's own ranks timed (``anchoring.anchor``, Note [Anchor
   the network to the recording]); every target grid run is predicted from it and
   the network model at the target, launch by launch, and the launches' times
   averaged.

Note [Nothing from the target world size]: a prediction may use only the source
recording and the standalone microbenchmark. The target group's calibration run
is recorded so that the target runs are interleaved as ``--grid`` interleaves
them (and one ``--workdir`` serves both commands), but it is never read: no
allreduce probe, rank speeds (``measured_backward_scale`` is empty at another
world size) or jitter come from it. From a target run, the prediction reads only
its DDP options (``extract.config_from_trace``), as a user's question would state them.
"""
from __future__ import annotations

import json
import math
import statistics
import sys

from ddpsim.experiments.calibrate import calibrate_world_sizes, parse_world_sizes
from ddpsim.experiments.compare import error_pct, parse_jitter
from ddpsim.experiments.grid import CALIBRATION_CAP_MB, SIM_ITERS, learn, predict_runs
from ddpsim.experiments.recorder import CAL_REPS, CAL_SIZES, Recorder
from ddpsim.experiments.table import report, stats

LAUNCHES = 3  # launches of each world size's group, pooled (Note [Pool launches]); torch has no such thing
RECORD_ITERS = 20  # iterations per run in each launch: 3 x 20 where one launch of 40 took ~7 minutes


def measure_network(rec: Recorder, model: str, world_sizes: list[int], given: dict | None = None) -> dict:
    """The calibration of the network at ``world_sizes``: ``given``, else the one measured for
    ``model`` in the workdir (``--reuse``), else measured now and saved there."""
    from ddpsim.sim.netmodel import covers

    if given is not None:
        missing = [k for k in world_sizes if not covers(given, k)]
        if missing:
            raise ValueError(f"--calibration has no line or fit for world size {missing[0]}")
        return given
    path = rec.work / f"{model}_network_ws{'-'.join(map(str, world_sizes))}.json"
    if rec.reuse and path.exists():
        return json.loads(path.read_text())
    rec.log(f"    calibrate: allreduce microbenchmark at world sizes {world_sizes}")
    cal = calibrate_world_sizes(CAL_SIZES, CAL_REPS, world_sizes, timeout=600.0, log=rec.log)
    path.write_text(json.dumps(cal, indent=1))
    return cal


def run_extrapolate(models, source_ws: int, targets: list[int], configs, record_iters=RECORD_ITERS, sim_iters=SIM_ITERS,
                    workdir=None, jitter=None, log=None, reuse=False,
                    calibration_cap_mb: float = CALIBRATION_CAP_MB, network: dict | None = None,
                    launches: int = LAUNCHES) -> dict:
    """Learn each model at ``source_ws``, predict its grid runs at each of ``targets`` (module docstring),
    over ``launches`` launches (Note [Pool launches])."""
    rec = Recorder(workdir, configs, record_iters, reuse, calibration_cap_mb, log)
    sizes = [source_ws] + targets
    rows, singles, calibrations, networks, measured = [], [], [], {}, {}
    if reuse:
        rec.check_reuse([(m, ws, k) for m in models for ws in sizes for k in range(1, launches + 1)])
    done = False
    try:
        recorded = record_launches(rec, models, sizes, launches)
        for model in models:
            rec.log(f"{model}: learn at ws{source_ws}, predict ws{','.join(map(str, targets))}")
            net = measure_network(rec, model, sizes, network)
            networks[model] = {k: v for k, v in net.items() if k in ("world_sizes", "fit", "time_slice_s", "host_cpus")}
            per_launch = []
            for launch in range(1, launches + 1):
                rec.log(f"  launch {launch}")
                _, traces = recorded[model, launch][source_ws]
                w, jit, entry = learn(traces[0], rec.paths(model, source_ws, launch)[0], source_ws, measured,
                                      sim_iters, jitter, rec.log, network=net)
                calibrations.append({**entry, "launch": launch})
                launch_rows = []
                for ws in targets:  # Note [Nothing from the target world size]: tspecs[0], ttraces[0] never read
                    tspecs, ttraces = recorded[model, launch][ws]
                    launch_rows += predict_runs(w, jit, tspecs[1:], ttraces[1:], sim_iters, rec.log)
                per_launch.append(launch_rows)
            singles += [row for launch_rows in per_launch for row in launch_rows]
            rows += pool_launches(per_launch)
        done = True
    finally:
        rec.close(done)  # a failed or interrupted run keeps its temporary folder: the error names traces in it
    return rec.result(rows, calibrations, networks=networks, from_world_size=source_ws, launches=launches,
                      single_launch_stats=stats(singles))


def record_launches(rec: Recorder, models, sizes: list[int], launches: int) -> dict:
    """(model, launch) -> that launch's groups at every world size of ``sizes``, taking turns;
    every model once, then every model again (Note [Pool launches])."""
    recorded = {}
    for launch in range(1, launches + 1):
        for i, model in enumerate(models, 1):
            rec.log(f"[launch {launch}/{launches}, {i}/{len(models)}] {model}: record at "
                    f"ws{','.join(map(str, sizes))} in turns")
            recorded[model, launch] = rec.groups(model, sizes, launch=launch)
    return recorded


# Note [Pool launches]: a launch of ranks draws a speed of its own and keeps it. On the
# EPYC VM (2026-11-25, docs/accuracy.md) shuffled's backward at 4 ranks over 2 ranks
# held one value over all nine runs of a recording, even with its runs spread over the
# whole recording, and went from 1.44x to 2.75x between recordings; five launches of
# one run one after the other, without DDP's turns, gave 61-79 ms at 4 ranks. One
# launch per world size thus moved a model's eight rows together, by more than the
# bound asked, with nothing in the 2-rank recording to foretell it: what a prediction
# can be held to is the run's expected time, not one launch's draw. So each world
# size is launched ``--launches`` times (every model once, then every model again, so
# a model's launches also fall in different minutes), each launch learnt from and
# predicted on its own; a row's predicted and measured times are the means over the
# launches. The rows of the launches alone are kept (``launch_errors_pct``,
# ``single_launch_stats``). Pooling three of the morning's five single-launch
# recordings, offline, met the bound in 10 of 10 triples where one met it in 1 of 5.
POOLED = ("predicted_ms", "measured_ms", "bucket_start_error_pct", "exposed_comm_pred_ms", "exposed_comm_meas_ms")


def pool_launches(per_launch: list[list[dict]]) -> list[dict]:
    """One row per run from the same run's row in each launch (Note [Pool launches]); a
    run that failed in any launch stays failed."""
    pooled = []
    for same in zip(*per_launch, strict=True):
        row = dict(same[0])
        failed = next((r for r in same if r.get("error")), None)
        if failed is not None:
            row.update({k: math.nan for k in POOLED + ("error_pct",)}, error=failed["error"])
        else:
            row.update({k: statistics.mean(r[k] for r in same) for k in POOLED})
            row["error_pct"] = error_pct(row["predicted_ms"], row["measured_ms"])
        row["launch_errors_pct"] = [r["error_pct"] for r in same]
        row["launch_measured_ms"] = [r["measured_ms"] for r in same]
        pooled.append(row)
    return pooled


def main_extrapolate(args) -> int:
    from ddpsim.experiments.calibrate import load_calibration
    from ddpsim.experiments.grid import parse_grid, wait_if_asked

    if args.from_world_size < 2:
        raise ValueError(f"--from-world-size must be >= 2 (a network is learnt from its allreduces), "
                         f"not {args.from_world_size}")
    targets = parse_world_sizes("4" if args.world_sizes is None else args.world_sizes)
    if args.from_world_size in targets:
        raise ValueError(f"--world-sizes {args.world_sizes} includes --from-world-size {args.from_world_size}: "
                         "that is --grid, not an extrapolation")
    if args.launches < 1:
        raise ValueError(f"--launches must be >= 1, not {args.launches}")
    models, configs = parse_grid(args)
    network = load_calibration(args.calibration) if args.calibration else None
    wait_if_asked(args)
    sim_iters = SIM_ITERS if args.iters is None else args.iters
    res = run_extrapolate(models, args.from_world_size, targets, configs, args.record_iters, sim_iters,
                          args.workdir, parse_jitter(args.jitter),
                          log=lambda m: print(m, file=sys.stderr, flush=True), reuse=args.reuse,
                          calibration_cap_mb=args.calibration_cap, network=network, launches=args.launches)
    print(f"learnt at world size {args.from_world_size}, predicted at {','.join(map(str, targets))}")
    report(res, args.out)
    return 0
