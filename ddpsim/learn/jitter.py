"""The rank noise (jitter) a prediction simulates with: measured in the run, or fitted to it."""
from __future__ import annotations

from ddpsim.analysis import summarize
from ddpsim.learn.extract import replay_config
from ddpsim.sim.api import simulate


def fit_jitter(workload, calibration, sim_iters: int = 40, hi: float = 0.6, steps: int = 12) -> float:
    """The rank-noise level that makes the calibration run's own prediction match it.

    Real ranks are not identical: each micro-step, each rank's compute is a little
    faster or slower (other processes on the cores, caches), and every collective
    waits for the slowest rank, so the measured iteration time is above the
    noise-free one. The simulator's ``jitter`` (a per-rank, per-micro-step compute
    multiplier ``1 + jitter·z``) models this; it is fitted here by bisection on the
    calibration run alone (never on grid runs), and used for every grid row.
    """
    target = summarize(calibration)["iteration_time_s"]

    def pred(j):
        return simulate(workload, replay_config(workload, calibration, iters=sim_iters,
                                                jitter=j))[1]["iteration_time_s"]

    if pred(0.0) >= target:
        return 0.0
    if pred(hi) <= target:
        return hi
    lo = 0.0
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pred(mid) < target else (lo, mid)
    return (lo + hi) / 2


def pick_jitter(jitter, workload, learnt_from, sim_iters: int) -> float:
    """The jitter to simulate with: a number as given, ``"fit"`` (``fit_jitter``), or
    None: the coefficient of variation of per-rank compute measured in the run the
    workload was learnt from, between the ranks of each iteration (``extract``'s
    ``jitter_estimated``, Note [Only rank-to-rank noise makes ranks wait]).

    Note [Measured, not fitted, noise]: fitting the jitter so that the calibration
    run predicts itself made it absorb that one run's measurement noise: a per-
    iteration spread of +-20% leaves its median ~4% uncertain, and two recordings
    of the same grid gave fitted jitters of 0.03 and 0.50 for the same model, moving
    every prediction by ~10%. The measured variation is a property of the run, not
    of its median, and varied far less (0.12 vs 0.19).
    """
    if jitter is None:
        return float(workload.meta.get("jitter_estimated", 0.0))
    if jitter == "fit":
        return fit_jitter(workload, learnt_from, sim_iters)
    return float(jitter)
