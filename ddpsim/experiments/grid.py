"""``python -m ddpsim validate --grid``: record a grid of real runs and predict each one.

For each model and world size, ONE calibration run (torch DDP with
``--calibration-cap`` MiB buckets, a cap that is not on the grid) and every grid
configuration are recorded together, interleaved iteration by iteration (Note
[Interleave the measurements]). The workload, the ranks' speeds and the rank noise
are learnt from the calibration run alone, with the allreduce cost timed in the
calibration run's ranks between its iterations (Note [Calibrate in the recording's
ranks]); each grid run is then simulated with its own options and compared
(``compare.predict_row``). The table goes to stdout, and to OUT.csv / OUT.json.
"""
from __future__ import annotations

import itertools
import math
import sys
import time
from pathlib import Path

from ddpsim.analysis import summarize
from ddpsim.buckets import REAL_ORDERS, BucketOrder
from ddpsim.trace import save_trace
from ddpsim.experiments.anchoring import anchor
from ddpsim.experiments.calibrate import calibrate, fit_calibration
from ddpsim.experiments.compare import parse_jitter, predict_row
from ddpsim.experiments.recorder import CAL_REPS, CAL_SIZES, Recorder
from ddpsim.experiments.table import format_row, report, stats  # noqa: F401 (stats: its tests import it from here)
from ddpsim.learn.jitter import pick_jitter
from ddpsim.record.timeslice import time_slice

SIM_ITERS = 40  # synced steps each prediction simulates (validate --grid/--extrapolate --iters); not in torch
RECORD_ITERS = 40  # iterations per recorded run: an iteration varies by +-20% here, the median of ~38 steady ones by ~3%
CALIBRATION_CAP_MB = 4.0  # MiB; the calibration run's bucket_cap_mb: between the grid's 0.25 and torch's 25


def grid_configs(caps, orders, find_unused) -> list[dict]:
    return [{"bucket_cap_mb": c, "order": o, "find_unused": f}
            for c, o, f in itertools.product(caps, orders, find_unused)]


def _cap(v: str):
    v = v.strip()
    return None if v in ("default", "none", "") else float(v)


def _bool(v: str) -> bool:
    v = v.strip().lower()
    if v in ("on", "true", "1", "yes"):
        return True
    if v in ("off", "false", "0", "no"):
        return False
    raise ValueError(f"--find-unused values are on/off, not {v!r}")


def wait_for_load(limit: float, max_s: float, log=print, poll_s: float = 30.0) -> float:
    """Poll /proc/loadavg until the 1-minute load is below ``limit`` (or ``max_s`` passed)."""
    if not (math.isfinite(limit) and limit > 0) or not (math.isfinite(max_s) and max_s >= 0):
        raise ValueError(f"--wait-load wants a finite load average > 0 and --wait-max-s finite seconds >= 0, "
                         f"not {limit:g} and {max_s:g}")
    t0 = time.monotonic()
    while True:
        load = float(Path("/proc/loadavg").read_text().split()[0])
        if load < limit or time.monotonic() - t0 >= max_s:
            return load
        log(f"load average {load:.2f} >= {limit}: waiting ({time.monotonic() - t0:.0f} s so far)")
        time.sleep(poll_s)



# Note [Calibrate in the recording's ranks]: the shared-core model needs each
# allreduce's cost *alone* (Note [Calibrate alone] in linkfit.py). It used to come
# from ``ddpsim calibrate`` in fresh ranks a minute after the recording, and the
# machine's speed drifts more than that in a minute: in one recording (validate
# grid, 2026-11-21) an 8 MiB allreduce took 16.5 ms in `calibrate`, while the grid
# runs' 10 MiB buckets, reduced after backward, took 14 ms; mlp at 2 ranks with
# torch's 25 MiB cap came out 20% slow. So the calibration run's ranks time one
# allreduce of each size (after a barrier, nothing else running) after every round
# of the interleaved iterations (``RecordConfig.probe_allreduce_bytes``): the line
# is measured at the same moments as the runs it predicts. Over three fresh
# recordings the worst iteration-time error went from 11.8/14.2/12.5% to
# 11.5/11.0/12.6% and the worst bucket start from 10.3/9.2/5.9% to 9.5/7.2/7.1%
# (the same traces predicted both ways).


def attach_calibration(cal, ws: int, measured: dict) -> bool:
    """Give calibration run ``cal`` its allreduce line, ``meta["calibration"]``, if it has
    none (True: the trace changed and should be saved).

    From the run's own probe (Note [Calibrate in the recording's ranks]); a run
    recorded without one gets ``ddpsim calibrate``'s line. ``measured`` keeps what is
    measured outside the recording once per grid: the scheduler's time slice
    (``"turn"``) and ``calibrate``'s line per world size.
    """
    def turn() -> float:
        if "turn" not in measured:
            measured["turn"] = time_slice()
        return measured["turn"]

    line = cal.meta.get("calibration")
    if line is not None:
        if "time_slice_s" not in line:  # recorded before calibrate measured it
            line["time_slice_s"] = turn()
        return False
    probe = cal.meta.get("allreduce_probe")
    if probe:
        cal.meta["calibration"] = fit_calibration(probe, ws, turn())
    else:
        if ws not in measured:
            measured[ws] = calibrate(CAL_SIZES, CAL_REPS, world=ws)
        cal.meta["calibration"] = measured[ws]
    return True


def run_grid(models, world_sizes, configs, record_iters=RECORD_ITERS, sim_iters=SIM_ITERS, workdir=None, jitter=None,
             log=None, reuse=False, calibration_cap_mb: float = CALIBRATION_CAP_MB) -> dict:
    """Record calibration + grid runs for each (model, world size) and predict each grid run.

    Note [Interleave the measurements]: two identical runs recorded seconds apart on
    this 2-core machine differed by up to a third, far more than the accuracy asked
    of the model. So the calibration run and every grid run of one (model, world
    size) are recorded together in the same ranks, taking turns iteration by
    iteration (``record_many``): a slow spell hits all of them alike. The workload is
    still learnt from the calibration run alone.

    ``reuse``: load the runs from ``workdir`` when their traces are there instead of recording.
    """
    rec = Recorder(workdir, configs, record_iters, reuse, calibration_cap_mb, log)
    rows, calibrations, measured = [], [], {}
    groups = [(m, ws) for m in models for ws in world_sizes]
    if reuse:  # before the first recording: an empty --workdir has nothing to reuse
        rec.check_reuse([(m, ws, 1) for m, ws in groups], every=False)
    done = False
    try:
        for g, (model, ws) in enumerate(groups, 1):
            rec.log(f"[{g}/{len(groups)}] {model} ws{ws}: calibration run + {len(configs)} grid runs, interleaved")
            specs, traces = rec.group(model, ws)
            w, jit, entry = learn(traces[0], rec.paths(model, ws)[0], ws, measured, sim_iters, jitter, rec.log)
            calibrations.append(entry)
            rows += predict_runs(w, jit, specs[1:], traces[1:], sim_iters, rec.log)
        done = True
    finally:
        rec.close(done)  # a failed or interrupted grid keeps its temporary folder: the error names traces in it
    return rec.result(rows, calibrations)


def learn(cal, path, ws: int, measured: dict, sim_iters: int, jitter, log, network=None):
    """(workload, jitter, summary) learnt from calibration run ``cal`` (saved to ``path`` if
    its allreduce line was attached); ``network``: a calibration whose lines serve
    other world sizes (Note [Ranks that share cores slow the ring])."""
    from ddpsim.learn.extract import workload_from_trace
    from ddpsim.learn.refine import refine

    if attach_calibration(cal, ws, measured):
        save_trace(cal, path)
    # Note [Self-calibration]; with 'fit' the jitter is fitted afterwards, on the refined workload
    if jitter in (None, "recorded"):  # the user's path: Note [Replay the recorded ranks' speeds]
        w, jit = refine(workload_from_trace(cal), cal), "recorded"
    else:
        w = refine(workload_from_trace(cal), cal, sim_iters, 0.0 if jitter == "fit" else jitter, noise="drawn")
        jit = pick_jitter(jitter, w, cal, sim_iters)
    entry = {"model": cal.meta.get("model"), "world_size": ws, "link": w.link.to_dict(), "jitter": jit,
             "measured_ms": summarize(cal)["iteration_time_s"] * 1e3,
             "self_prediction_no_jitter": predict_row(w, cal, "torch", sim_iters, 0.0)}
    log(f"    calibration: measured {entry['measured_ms']:.1f} ms, jitter {jit}, "
        f"allreduce alone {w.link.allreduce_s(1 << 20, ws) * 1e3:.2f} ms/MiB")
    if network is not None:  # Note [Anchor the network to the recording]
        w.meta["calibration"] = anchor(network, cal.meta["calibration"], ws)
        entry["network_anchor"] = w.meta["calibration"]["anchored"]
    return w, jit, entry


def predict_runs(w, jit, specs, traces, sim_iters: int, log) -> list[dict]:
    """One table row per recorded run: ``w`` simulated with the run's options against it."""
    rows = []
    for (name, cfg, c), real in zip(specs, traces):
        row = {"model": cfg.model, "world_size": cfg.world_size, "bucket_cap_mb": c["bucket_cap_mb"] or "default",
               "order": c["order"], "find_unused": c["find_unused"], "impl": cfg.impl}
        try:
            row.update(predict_row(w, real, c["order"], sim_iters, jit))
        except Exception as e:  # noqa: BLE001 - one failed row must not lose the grid
            row.update({k: math.nan for k in ("predicted_ms", "measured_ms", "error_pct",
                                              "bucket_start_error_pct")},
                       error=f"{type(e).__name__}: {e}".splitlines()[0])
        rows.append(row)
        log("    " + format_row(row))
    return rows


def parse_grid(args) -> tuple[list[str], list[dict]]:
    """(models, grid configurations) from the --grid/--extrapolate flags, checked."""
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    caps = [_cap(c) for c in args.caps.split(",")]
    orders = [o.strip() for o in args.orders.split(",") if o.strip()]
    for o in orders:  # recorded, so only the orders a real run has (ddpsim.buckets.REAL_ORDERS)
        try:
            BucketOrder.parse(o, allowed=REAL_ORDERS)
        except ValueError as e:
            raise ValueError(f"--orders: {e}") from None
    fus = [_bool(v) for v in args.find_unused.split(",") if v.strip()]
    if not models or not orders or not fus:
        raise ValueError("the grid needs at least one model, order and find_unused value")
    for c in caps:
        if c is not None and not (math.isfinite(c) and c > 0):
            raise ValueError(f"--caps must be positive MiB or 'default', not {c}")
    cal_cap = args.calibration_cap
    if not (math.isfinite(cal_cap) and cal_cap > 0):
        raise ValueError(f"--calibration-cap must be positive MiB, not {cal_cap}")
    if cal_cap in caps or (cal_cap == 25.0 and None in caps):
        raise ValueError(f"--calibration-cap {cal_cap:g} is one of --caps: the calibration run's "
                         "configuration must not be on the grid")
    if args.reuse and not args.workdir:
        raise ValueError("--reuse needs --workdir (where the traces are)")
    if args.record_iters < 4:
        raise ValueError("--record-iters must be >= 4 (iteration 0 and the rebuild are not steady state)")
    return models, grid_configs(caps, orders, fus)


def wait_if_asked(args) -> None:
    if args.wait_load is not None:
        load = wait_for_load(args.wait_load, args.wait_max_s,
                             log=lambda m: print(m, file=sys.stderr, flush=True))
        print(f"load average at start: {load:.2f}", file=sys.stderr, flush=True)


def main_grid(args) -> int:
    try:
        world_sizes = [int(x) for x in args.world_sizes.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--world-sizes must be integers separated by commas, not {args.world_sizes!r}") from None
    if not world_sizes or min(world_sizes) < 1:
        raise ValueError("--grid needs at least one world size (>= 1)")
    models, configs = parse_grid(args)
    wait_if_asked(args)
    sim_iters = SIM_ITERS if args.iters is None else args.iters
    res = run_grid(models, world_sizes, configs, args.record_iters, sim_iters, args.workdir,
                   parse_jitter(args.jitter), reuse=args.reuse, calibration_cap_mb=args.calibration_cap)
    report(res, args.out)
    return 0
