"""``python -m ddpsim validate --extrapolate``: learn at one world size, predict the grid at others.

For each model:

1. the grid's group (``recorder.Recorder``: a calibration run and the grid runs,
   interleaved) at ``--from-world-size`` and at every target world size, all
   launched at once and taking turns round by round (Note [Take turns across world
   sizes] in ``ddpsim/record/turns.py``), so that a slow spell of the machine falls
   on the source and the targets alike;
2. ``ddpsim calibrate``'s allreduce microbenchmark at the source and every target
   world size, in fresh processes pinned as the recorder pins ranks
   (``calibrate.calibrate_world_sizes``): the network model
   (``ddpsim.sim.netmodel``, Note [Ranks that share cores slow the ring]);
3. the workload learnt from the source group's calibration run alone, exactly as
   ``--grid`` learns it (``grid.learn``), with the network model moved to the level
   of the allreduces the source's own ranks timed (``anchoring.anchor``, Note [Anchor
   the network to the recording]); every target grid run is predicted from it and
   the network model at the target.

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
import sys

from ddpsim.experiments.calibrate import calibrate_world_sizes, parse_world_sizes
from ddpsim.experiments.compare import parse_jitter
from ddpsim.experiments.grid import CALIBRATION_CAP_MB, learn, predict_runs
from ddpsim.experiments.recorder import CAL_REPS, CAL_SIZES, Recorder
from ddpsim.experiments.table import report


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


def run_extrapolate(models, source_ws: int, targets: list[int], configs, record_iters=40, sim_iters=40,
                    workdir=None, jitter=None, log=None, reuse=False,
                    calibration_cap_mb: float = CALIBRATION_CAP_MB, network: dict | None = None) -> dict:
    """Learn each model at ``source_ws``, predict its grid runs at each of ``targets`` (module docstring)."""
    rec = Recorder(workdir, configs, record_iters, reuse, calibration_cap_mb, log)
    rows, calibrations, networks, measured = [], [], {}, {}
    if reuse:
        rec.check_reuse([(m, ws) for m in models for ws in [source_ws] + targets])
    try:
        for i, model in enumerate(models, 1):
            rec.log(f"[{i}/{len(models)}] {model}: learn at ws{source_ws}, predict ws{','.join(map(str, targets))}")
            groups = rec.groups(model, [source_ws] + targets)
            specs, traces = groups[source_ws]
            net = measure_network(rec, model, [source_ws] + targets, network)
            networks[model] = {k: v for k, v in net.items() if k in ("world_sizes", "fit", "time_slice_s", "host_cpus")}
            w, jit, entry = learn(traces[0], rec.paths(model, source_ws)[0], source_ws, measured, sim_iters,
                                  jitter, rec.log, network=net)
            calibrations.append(entry)
            for ws in targets:  # Note [Nothing from the target world size]: traces[0] is never read
                tspecs, ttraces = groups[ws]
                rows += predict_runs(w, jit, tspecs[1:], ttraces[1:], sim_iters, rec.log)
    finally:
        rec.close()
    return rec.result(rows, calibrations, networks=networks, from_world_size=source_ws)


def main_extrapolate(args) -> int:
    from ddpsim.experiments.calibrate import load_calibration
    from ddpsim.experiments.grid import parse_grid, wait_if_asked

    if args.grid or args.trace or args.against:
        raise ValueError("--extrapolate records its own runs: drop --grid, --trace and --against")
    if args.from_world_size < 2:
        raise ValueError(f"--from-world-size must be >= 2 (a network is learnt from its allreduces), "
                         f"not {args.from_world_size}")
    targets = parse_world_sizes(args.world_sizes or "4")
    if args.from_world_size in targets:
        raise ValueError(f"--world-sizes {args.world_sizes} includes --from-world-size {args.from_world_size}: "
                         "that is --grid, not an extrapolation")
    models, configs = parse_grid(args)
    network = load_calibration(args.calibration) if args.calibration else None
    wait_if_asked(args)
    res = run_extrapolate(models, args.from_world_size, targets, configs, args.record_iters, args.iters or 40,
                          args.workdir, parse_jitter(args.jitter),
                          log=lambda m: print(m, file=sys.stderr, flush=True), reuse=args.reuse,
                          calibration_cap_mb=args.calibration_cap, network=network)
    print(f"learnt at world size {args.from_world_size}, predicted at {','.join(map(str, targets))}")
    report(res, args.out)
    return 0
