"""A prediction against a measurement: iteration time, exposed communication, bucket launches.

Shared by ``validate`` (one trace pair) and ``grid`` (a recorded grid of runs).
"""
from __future__ import annotations

import math
import statistics

from ddpsim.analysis import steady_cycles, summarize
from ddpsim.buckets import REAL_ORDERS, BucketOrder
from ddpsim.learn.extract import replay_config
from ddpsim.sim.api import simulate

METRICS = ("iteration_time_s", "exposed_comm_s", "overlap_fraction")


def bucket_starts(trace) -> dict[int, float]:
    """Bucket -> launch time after the iteration start (s), median over steady iterations.

    Iteration start: the earliest forward start on any rank; launch: the mean over
    ranks (the same definitions for real and simulated traces).
    """
    per: dict[int, list[float]] = {}
    for cycle in steady_cycles(trace):
        its = trace.iteration_on_ranks(cycle[-1])
        start = min(it.forward.start_ns for it in trace.iteration_on_ranks(cycle[0]))
        launches: dict[int, list[int]] = {}
        for it in its:
            for b in it.buckets:
                launches.setdefault(b.bucket, []).append(b.launch_ns)
        for b, ls in launches.items():
            per.setdefault(b, []).append((statistics.mean(ls) - start) * 1e-9)
    return {b: statistics.median(v) for b, v in per.items()}


def bucket_start_error(predicted, measured, iteration_s: float) -> float:
    """max over buckets of |predicted - measured launch| / measured iteration time (fraction)."""
    p, m = bucket_starts(predicted), bucket_starts(measured)
    if set(p) != set(m) or not m or iteration_s <= 0:
        return math.nan
    return max(abs(p[b] - m[b]) for b in m) / iteration_s


def error_pct(predicted: float, measured: float) -> float:
    """The prediction's error, in % of the measurement."""
    return (predicted - measured) / measured * 100


def predict_row(workload, measured, order: str, sim_iters: int = 20, jitter: float | str = 0.0) -> dict:
    """Simulate the recorded run ``measured``'s options from ``workload``; compare.

    ``jitter="recorded"``: the ranks of the run ``workload`` was learnt from, as recorded, where the
    world size matches (Note [Replay the recorded ranks' speeds]); a number: a drawn rank noise."""
    fields = {"order": BucketOrder.parse(order, allowed=REAL_ORDERS).value}
    if jitter != "recorded":
        fields.update(iters=sim_iters, jitter=jitter)
    elif measured.world_size != workload.meta.get("recorded_world_size"):
        fields.update(iters=sim_iters)
    cfg = replay_config(workload, measured, **fields)
    sim, s = simulate(workload, cfg)
    m = summarize(measured)
    pred, meas = s["iteration_time_s"], m["iteration_time_s"]
    n_real = len(measured.longest_rank.layouts[-1].buckets) if measured.longest_rank.layouts else 0
    return {"predicted_ms": pred * 1e3, "measured_ms": meas * 1e3, "error_pct": error_pct(pred, meas),
            "bucket_start_error_pct": bucket_start_error(sim, measured, meas) * 100,
            "n_buckets": f"{s['n_buckets']}/{n_real}",
            "exposed_comm_pred_ms": s["exposed_comm_s"] * 1e3, "exposed_comm_meas_ms": m["exposed_comm_s"] * 1e3}


def parse_jitter(value):
    """--jitter: a number, 'fit', 'recorded', or None (absent: measured)."""
    if value is None or value in ("fit", "recorded"):
        return value
    try:
        j = float(value)
    except ValueError:
        raise ValueError(f"--jitter must be a number >= 0, 'fit' or 'recorded', not {value!r}") from None
    if not (math.isfinite(j) and j >= 0):
        raise ValueError(f"--jitter must be a number >= 0, 'fit' or 'recorded', not {value!r}")
    return j
