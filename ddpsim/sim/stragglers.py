"""Rank noise at scale: how long every rank waits for the slowest one.

Note [Waiting for the slowest rank]: each rank's compute varies a little from step to step
(``jitter``: the coefficient of variation sigma of one rank's step compute, between the ranks
of one step, ``learn.extract``'s ``jitter_estimated`` or a GPU profile's ``rank_spread``).
Every bucket's allreduce starts when the *last* rank launches it, so each synced step ends
when the slowest rank does; with ``n`` ranks the expected slowest multiplier is
``1 + sigma·E[max of n standard normals]``, an extreme-value effect that grows about as
``sigma·sqrt(2 ln n)``: 0.56 sigma at 2 ranks, 2.7 at 256, 4.4 at 100,000 (``expected_max``).
With ``k`` micro-steps per sync (no_sync) the ranks re-align once per window, whose compute
varies by ``sigma / sqrt(k)`` when the micro-steps vary independently.

``jitter_mode="expected"`` plays that expectation: all ranks that are not stragglers are one
actor at ``1 + sigma·E[max_n] / sqrt(k)``, deterministic at any world size, so a prediction
moves smoothly with the world size and its straggler share (the time with the noise minus the
time without) is exact for that expectation. ``"sampled"`` (the default) draws each rank's
multiplier (``plan._factors``), as a recorded run is replayed; so do all ranks under uneven inputs,
where each rank plays alone with its own data and no group is left to carry the expectation.
A rank named slow (``stragglers``, ``--straggler RANK:F``) is waited for the same way, and the
straggler share takes it out too (``learn.noise.quiet_config``).
"""
from __future__ import annotations

import math
import statistics
from functools import lru_cache

MODES = ("sampled", "expected")
_GRID = 4000  # integration points for expected_max


@lru_cache(maxsize=4096)
def expected_max(n: int) -> float:
    """E[max of ``n`` iid standard normals] (0 for one), by integrating x·d(Phi(x)^n)."""
    if n <= 1:
        return 0.0
    nd = statistics.NormalDist()
    lo, hi = -9.0, 12.0
    h = (hi - lo) / _GRID
    total = 0.0
    prev = nd.cdf(lo) ** n
    for i in range(1, _GRID + 1):
        x = lo + i * h
        cur = nd.cdf(x) ** n
        total += (x - h / 2) * (cur - prev)  # midpoint of the step times the probability mass in it
        prev = cur
    return total


def slowest_factor(jitter: float, n: int, micro_steps: int = 1) -> float:
    """The expected compute multiplier of the slowest of ``n`` ranks (Note [Waiting for the slowest rank])."""
    return max(0.05, 1.0 + jitter * expected_max(n) / math.sqrt(max(micro_steps, 1)))
