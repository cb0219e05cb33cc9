"""Who shares a CPU core in a recorded gloo run, and how much work each job did.

The simulator's shared-core model (``Link.shared_core``, ``core.Core``) plays
every rank's compute and its collectives' CPU work as jobs on a processor-sharing
core. To learn a workload from a recording, each measured duration has to be
turned back into work *alone* on the core: ``compute_work`` integrates the
compute job's rate (``core.share``) over it. This module finds those jobs:

- a rank's own collectives while they run (``flights``), each with its CPU
  demand (``weigh``, Note [Latency-bound jobs on a shared core] in core.py);
- with more ranks than CPUs (4 ranks on this 2-core machine: ranks 0 and 2 on CPU
  0), the co-located ranks' compute and collectives too (``core_jobs``,
  Note [Ranks that share a CPU]).

Times are integer ns, as in the trace.
"""
from __future__ import annotations

from ddpsim.sim.core import share
from ddpsim.sim.network import Link
from ddpsim.trace import Iteration, Trace


def pinned_cpus(trace: Trace) -> int:
    """How many CPUs the recorded ranks were pinned to, rank r on CPU r % n (0: not pinned / unknown).

    The recorder writes ``meta.pinning.cpus``; older traces only say ``config.pin_cpus``,
    and then the CPU count of ``meta.calibration`` (the same machine) is used. A
    simulated trace says ``meta.link.cpus``.
    """
    pin = trace.meta.get("pinning")
    if isinstance(pin, dict):
        return int(pin.get("cpus") or 0)
    if trace.source == "simulated":  # what the simulator played
        return int((trace.meta.get("link") or {}).get("cpus") or 0)
    cfg, cal = trace.meta.get("config") or {}, trace.meta.get("calibration") or {}
    return int(cal.get("host_cpus") or 0) if cfg.get("pin_cpus") else 0


def collectives(it: Iteration) -> list[tuple]:
    """(key, launch, complete, bytes) of an iteration's collectives, in launch order."""
    out = [(b.bucket, b.launch_ns, b.complete_ns, b.bytes) for b in sorted(it.buckets, key=lambda b: b.launch_ns)]
    if it.bitmap_allreduce:
        c = it.bitmap_allreduce
        out.append((10 ** 9, c.launch_ns, c.complete_ns, c.bytes))
    return out


def flights(trace: Trace, sync_its, concurrency: int) -> dict[int, list[tuple[int, int, int]]]:
    """id(iteration) -> (start, end, bytes) of the rank's collectives while they run.

    A collective runs on a rank from the *last* rank's launch (or from the
    completion of this rank's collective ``concurrency`` places earlier: gloo's
    2 threads) to its completion on this rank.
    """
    mine = {id(it) for it in sync_its}
    last: dict[tuple, int] = {}
    for r in trace.ranks:
        for it in r.iterations:
            if id(it) in mine:
                for key, launch, _c, _b in collectives(it):
                    k = (it.iteration, key)
                    last[k] = max(last.get(k, launch), launch)
    out = {}
    for it in sync_its:
        spans, ends = [], []
        for key, launch, complete, nbytes in collectives(it):
            start = last[(it.iteration, key)]
            if len(ends) >= concurrency:
                start = max(start, sorted(ends)[-concurrency])
            start = min(start, complete)
            ends.append(complete)
            spans.append((start, complete, nbytes))
        out[id(it)] = spans
    return out


def ranks_per_core(world_size: int, cpus: int) -> int:
    """How many ranks share the busiest core when ``world_size`` ranks are pinned round
    robin to ``cpus`` CPUs (0: a core each)."""
    return -(-world_size // cpus) if cpus else 1


def weigh(flights_by_it: dict, link: Link, world_size: int) -> dict:
    """Each collective span as a job with its CPU demand (``Link.core_demand``).

    Note [Latency-bound jobs on a shared core] (core.py); times the ranks on the
    core (Note [Ranks that share a CPU]).
    """
    per_core = ranks_per_core(world_size, link.cpus)
    return {k: [(s, e, link.core_demand(nbytes, world_size, per_core)) for s, e, nbytes in spans]
            for k, spans in flights_by_it.items()}


def busy(it: Iteration) -> list[tuple[int, int, float]]:
    """When a rank computes (demand 1): forward, backward up to its last gradient, the optimizer step."""
    out = [(it.forward_compute_start_ns, it.forward.end_ns, 1.0), (it.backward.start_ns, it.backward_compute_end_ns, 1.0)]
    if it.optimizer:
        out.append((it.optimizer.start_ns, it.optimizer.end_ns, 1.0))
    return out


def core_jobs(trace: Trace, its, jobs_by_it: dict, cpus: int) -> dict[int, list[tuple]]:
    """id(iteration) -> (start, end, demand) of the other jobs on that rank's core during it.

    Note [Ranks that share a CPU]: with ``cpus`` CPUs and more ranks, rank r shares
    CPU ``r % cpus`` with the ranks congruent to it. Their compute (``busy``)
    competes with r's compute, so it is a job on r's core too. A collective is one
    job per core, not one per rank: ``ddpsim calibrate`` timed it with the ranks
    sharing cores in the same way, so its cost already holds that sharing. (Other
    configurations recorded interleaved with this one run at other times and are
    not counted.)
    """
    by = {(r.rank, it.iteration): it for r in trace.ranks for it in r.iterations}
    wanted = {id(it) for it in its}
    out = {}
    for r in trace.ranks:
        mates = [q.rank for q in trace.ranks if cpus and q.rank != r.rank and q.rank % cpus == r.rank % cpus]
        for it in r.iterations:
            if id(it) not in wanted:
                continue
            spans = list(jobs_by_it.get(id(it), []))
            for q in mates:
                other = by.get((q, it.iteration))
                if other is not None:  # its collectives are r's own: one job per core
                    spans += busy(other)
            out[id(it)] = spans
    return out


def _integrate(lo: float, hi: float, spans, rate) -> float:
    """``∫ rate(running spans) dt`` over [lo, hi]: piecewise constant between span ends."""
    if hi <= lo:
        return 0.0
    pts = sorted({lo, hi} | {t for sp in spans for t in sp[:2] if lo < t < hi})
    work = 0.0
    for a, b in zip(pts, pts[1:]):
        mid = (a + b) / 2
        work += (b - a) * rate([sp for sp in spans if sp[0] <= mid < sp[1]])
    return work


def compute_work(lo: float, hi: float, jobs) -> float:
    """Work done in [lo, hi] by a compute job beside ``jobs`` (start, end, demand) (ns).

    The inverse of the simulator's ``Core``: ``dt`` times the compute job's rate
    from ``core.share`` while the other jobs run.
    """
    return _integrate(lo, hi, jobs, lambda running: share([1.0] + [j[2] for j in running])[0])


def shared_work(lo: float, hi: float, spans, base: int, compute: tuple | None = None) -> float:
    """Work done in [lo, hi] by one job on a processor-sharing core (ns).

    ``spans``: (start, end, ...) of the other jobs running on the core; the job
    gets ``1 / (base + running jobs + [t in compute])`` of the core.
    """
    spans = list(spans) + ([compute] if compute else [])
    return _integrate(lo, hi, spans, lambda running: 1.0 / max(base + len(running), 1))
