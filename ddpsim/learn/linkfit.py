"""The allreduce cost line ``t = a + b·bytes`` of a recorded run, as a ring :class:`Link`.

Two ways to get it, both used by ``extract.workload_from_trace``:

- ``fit_shared_link`` (CPU gloo, shared core): ``meta.calibration`` from ``ddpsim
  calibrate`` when the trace carries one at its world size (``netmodel.measured_lines``) (Note [Calibrate
  alone]); otherwise a line through each recorded collective's work alone on
  the core;
- ``fit_link`` (other backends): a line through each collective's duration,
  measured from the *last* rank's launch (so waiting for a straggler is not
  counted) or from the completion of the collective ``concurrency`` places earlier
  (gloo's queue), to its completion.

``launch_line`` fits the cost of launching a bucket the same way.
"""
from __future__ import annotations

import statistics

from ddpsim.learn import contention
from ddpsim.sim import netmodel
from ddpsim.sim.network import Link
from ddpsim.trace import Trace

NS = 1e-9


def fit_shared_link(trace: Trace, sync_its, concurrency: int, flights, cpus: int = 0) -> tuple[Link, dict]:
    """The allreduce line through each collective's work alone on the core (shared core).

    Every collective counted as a full job (no CPU-time calibration to split it);
    co-located ranks' compute shares the core too (Note [Ranks that share a CPU]).
    """
    k = trace.world_size
    cal = trace.meta.get("calibration")
    line = netmodel.measured_lines(cal).get(k) if isinstance(cal, dict) else None  # this world size's line
    if line is not None and "intercept_s" in line:
        # Note [Calibrate alone]: the shared-core model needs each allreduce's cost
        # *alone*; `ddpsim calibrate` (or, in validate --grid, the recording's own
        # ranks between iterations) measures exactly that over many sizes, where a
        # trace has only its few bucket sizes to fit a line through. Where ranks share
        # cores they take turns of the calibration's time slice (Note [Ranks take turns on a shared core]).
        link = netmodel.link_at(cal, k, concurrency, cpus=cpus)
        (a, b), core, _ = netmodel.lines_at(cal, k)
        return link, {"from": "meta.calibration (shared core)", "intercept_s": a, "s_per_byte": b,
                      "cpu_fit": core, "world_size": k}
    points = []
    mates = contention.core_jobs(trace, sync_its, {}, cpus)  # co-located ranks' compute
    for it in sync_its:
        spans = flights.get(id(it), [])
        others = spans + mates.get(id(it), [])
        compute = (it.backward.start_ns, it.backward_compute_end_ns)
        points += [(nbytes, contention.shared_work(s, e, others, 0, compute) * NS) for s, e, nbytes in spans]
    if k < 2 or not points:  # Note [No network from one rank]
        return no_network(k, points, concurrency, shared_core=True, cpus=cpus)
    a, b = fit_medians(points)  # one size: a line through the origin (Note [One bucket size and the latency probe])
    link = Link.from_fit(a, b, k, concurrency=concurrency, shared_core=True, cpus=cpus,
                         name=f"shared-core fit from trace (k={k})")
    return link, {"from": "trace (shared core)", "intercept_s": a, "s_per_byte": b,
                  "points": len(points), "world_size": k}


def collective_points(trace: Trace, sync_its, concurrency: int) -> list[tuple[int, float]]:
    """(bytes, seconds) per collective: from the last launch (or a free slot) to completion."""
    by = {}
    for it in sync_its:
        for key, launch, complete, nbytes in contention.collectives(it):
            by.setdefault((it.iteration, key), []).append((launch, complete, nbytes))
    points, done = [], {}
    for key in sorted(by):
        evs = by[key]
        launch, complete, nbytes = max(e[0] for e in evs), max(e[1] for e in evs), evs[0][2]
        prior = done.setdefault(key[0], [])
        start = max(launch, prior[-concurrency]) if len(prior) >= concurrency else launch
        prior.append(complete)
        points.append((nbytes, max(0, complete - start) * NS))
    return points


# Note [One bucket size and the latency probe]: a run whose collectives all have one size (a small
# model in one bucket, or equal buckets) gives one point, and a line through it cannot tell a
# collective's latency from its bandwidth: through the origin, a smaller bucket cap looks free.
# Every recording times a 4 KiB allreduce at its end in its own ranks (``meta.hook_rates``,
# ``allreduce_latency_s``: ``record/hookprobe.py``), and where the collectives do not run on the
# rank's own core (NCCL, gloo on CUDA tensors: ``fit_link``) the line goes through that point too.
# On a shared CPU core (``fit_shared_link``) it does not: there each collective counts as work on
# the core, and most of a small allreduce's time is waiting for the other rank, not work. A small
# CNN recorded in one 0.53 MiB bucket, three recordings at the default cap interleaved with three at
# cap 0.25 (2026-11-28): through the origin it predicted 0.25's iteration +5% (16.5 ms against
# 15.7 measured, means), exposed 2.4 ms (3.1) and overlap 77% (64%); through the probe, 17.9 ms
# (+14%), 4.3 ms and 56%. A measurement (`ddpsim calibrate`, or the What-if page's button at another
# world size) separates the two with five sizes.
LATENCY_BYTES = 4096  # bytes of the probe's allreduce (hookprobe.SMALL_ELEMENTS float32 elements)


def with_latency(points: list[tuple[int, float]], trace: Trace) -> list[tuple[int, float]]:
    """``points`` and, where they have one size only, the recording's latency probe at LATENCY_BYTES
    (Note [One bucket size and the latency probe])."""
    sizes = {x for x, _ in points}
    rates = trace.meta.get("hook_rates")
    lat = rates.get("allreduce_latency_s") if isinstance(rates, dict) else None
    if len(sizes) != 1 or min(sizes) <= LATENCY_BYTES or not isinstance(lat, (int, float)) or not 0 < lat < 1e3:
        return points
    if lat >= statistics.median(y for _, y in points):  # a probe as slow as the bucket: a flat line, no slope
        return points
    return points + [(LATENCY_BYTES, float(lat))] * len(points)


def _by_size(points) -> dict[int, list[float]]:
    by: dict[int, list[float]] = {}
    for x, y in points:
        by.setdefault(x, []).append(y)
    return by


def fit_medians(points: list[tuple[int, float]], weighted: bool = True) -> tuple[float, float]:
    """``fit_line`` through one median per size (robust to outliers); ``weighted``: each
    median counted as often as its size occurs."""
    return fit_line([(x, statistics.median(ys)) for x, ys in _by_size(points).items()
                     for _ in (ys if weighted else ys[:1])])


def launch_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(ns per launch, ns per byte) of launching a bucket (Note [Launching costs the autograd thread]).

    With one bucket size only, the cost is charged per launch: nothing separates a
    fixed from a per-byte part, and the fixed part (torch's hook: Python, the
    dispatcher, enqueueing) dominates small buckets: a 3.5 MiB launch took 0.54 ms
    here, yet each of seven 0.25-0.5 MiB launches 0.22-0.42 ms (transformer, 2
    ranks; charging it per byte predicted a 0.25 MiB cap 10% fast).
    """
    if len({n for n, _ in points}) == 1:
        return statistics.median(t for _, t in points), 0.0
    return fit_medians(points, weighted=False)


def fit_line(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares t = a + b·x with a, b >= 0."""
    n = len(points)
    if n == 0:
        return 0.0, 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    if sxx == 0:
        return 0.0, (my / mx if mx else 0.0)
    b = sum((p[0] - mx) * (p[1] - my) for p in points) / sxx
    a = my - b * mx
    if b <= 0:
        return my, 0.0
    if a < 0:
        b = sum(p[0] * p[1] for p in points) / sum(p[0] ** 2 for p in points)
        a = 0.0
    return a, b


# Note [No network from one rank]: a 1-rank run (or one without a collective) has no allreduce
# to learn a network from (NCCL runs no kernel for one rank; what its collectives take is the
# backend's own work: Note [One rank still pays for its collectives]), so its Link has no network
# (bandwidth 1e15 B/s, latency 0). The workload then carries this message
# (``meta['no_network']``) and ``sim.plan.resolve_link`` raises it when a simulation needs a
# network the user did not give; ``simulate`` and ``validate --against`` say the same.
NO_NETWORK = ("the trace has {ranks} rank(s) and no collective to learn a network from: to simulate "
              "{{world_size}} ranks give one: a network (the What-if page's Network; --hardware GPU-NETWORK such as "
              "h100-nvlink, or --bandwidth-gbps G [--latency-us L]) or a calibration (python -m ddpsim calibrate)")
NO_NETWORK_NAME = "none (no collective in the trace)"
ONE_RANK_NAME = "none (one rank: the recorded collectives' own cost)"

# Note [One rank still pays for its collectives]: at one rank DDP still runs its comm hook on
# every bucket: it divides the bucket and calls the backend's allreduce, which moves nothing over a
# network (NCCL runs no kernel) but takes time before its future completes: gloo on a 2-core CPU
# 0.3-0.6 ms exposed per iteration of 17-38 ms (mlp 0.6 ms; transformer 0.3 ms), NCCL on an H200
# 2-20 us per bucket. A replay at one rank costs each collective the line through the recorded ones
# (``Link.one_rank``), so its exposed time is the recording's (its overlap is none, as the
# recording's: Note [One rank communicates nothing] in analysis/metrics.py); every other world size
# still needs a network (Note [No network from one rank]).


def no_network(k: int, points: list[tuple[int, float]], concurrency: int, **kw) -> tuple[Link, dict]:
    """The Link of a run with no network to learn: one rank (or no collective). A 1-rank run's
    collectives keep their own cost (Note [One rank still pays for its collectives])."""
    one = fit_medians(points) if k == 1 and points else None
    link = Link(alpha_s=0.0, bandwidth_Bps=1e15, concurrency=concurrency, one_rank=one,
                name=NO_NETWORK_NAME if one is None else ONE_RANK_NAME, **kw)
    fit = {"from": "none", "no_network": NO_NETWORK.format(ranks=k), "world_size": k}
    if one is not None:
        fit.update(one_rank_intercept_s=one[0], one_rank_s_per_byte=one[1], points=len(points))
    return link, fit


def fit_link(trace: Trace, sync_its, concurrency: int) -> tuple[Link, dict]:
    points = collective_points(trace, sync_its, concurrency)
    k = trace.world_size
    cal = trace.meta.get("calibration")
    if (len({p[0] for p in points}) < 2 or k < 2) and isinstance(cal, dict) and "alpha_s" in cal:
        link = Link(alpha_s=float(cal["alpha_s"]), bandwidth_Bps=float(cal["bandwidth_Bps"]),
                    concurrency=concurrency, name="calibration")
        return link, {"from": "meta.calibration", **cal}
    if k < 2 or not points:  # Note [No network from one rank]
        return no_network(k, points, concurrency)
    points = with_latency(points, trace)  # Note [One bucket size and the latency probe]
    a, b = fit_medians(points)
    link = Link.from_fit(a, b, k, concurrency=concurrency, name=f"fit from trace (k={k})")
    return link, {"from": "trace", "intercept_s": a, "s_per_byte": b, "points": len(points),
                  "world_size": k}
