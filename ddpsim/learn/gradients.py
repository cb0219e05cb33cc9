"""Per-gradient backward compute from a recorded trace: the gaps between gradients, cleaned.

Used by ``extract.workload_from_trace``: each gap between two gradients' ready
times, less what the autograd thread spent launching buckets (Note [Launching
costs the autograd thread]) and, on a shared core, less the core's other jobs
(``contention``); then split into clean compute and a slowdown while
communication is in flight (``unmix_interference``); and each rank's speed
relative to the others (``rank_factors``).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from ddpsim.analysis import covered_fraction
from ddpsim.learn import contention
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace


@dataclass
class Gaps:
    deltas: dict[int, list] = field(default_factory=dict)  # param -> its gaps (ns of work)
    overlaps: dict[int, list[float]] = field(default_factory=dict)  # param -> fraction with comm in flight
    work_by_rank: dict[int, list[float]] = field(default_factory=dict)  # backward compute per iteration
    launch_points: list[tuple[int, float]] = field(default_factory=list)  # (bucket bytes, launch cost alone, ns)


def gradient_gaps(trace: Trace, clean, jobs: dict | None) -> Gaps:
    """The gaps of iterations ``clean``; ``jobs``: the other jobs on each one's core (shared core)."""
    out = Gaps()
    rank_of = {id(it): r.rank for r in trace.ranks for it in r.iterations}
    for it in clean:
        prev = it.backward.start_ns
        spans = comm_spans(it)
        others = jobs.get(id(it), []) if jobs is not None else None  # the other jobs on this rank's core
        work = 0.0
        launches = [(b.launch_ns, b.launch_end_ns, b.bytes) for b in it.buckets if b.launch_end_ns is not None]
        for g in sorted((g for g in it.grad_ready if not g.unused), key=lambda g: g.t_ns):
            own = [(a, e) for a, e, _ in launches if prev <= a < g.t_ns]  # Note [Launching costs the autograd thread]
            if jobs is not None:
                d = contention.compute_work(prev, g.t_ns, others)
                d = max(0.0, d - sum(contention.compute_work(a, min(e, g.t_ns), others) for a, e in own))
            else:
                d = max(0, g.t_ns - prev - sum(min(e, g.t_ns) - a for a, e in own))
                out.overlaps.setdefault(g.param, []).append(covered_fraction(spans, prev, g.t_ns))
            out.deltas.setdefault(g.param, []).append(d)
            work += d
            prev = g.t_ns
        out.work_by_rank.setdefault(rank_of.get(id(it), 0), []).append(work)
        for a, e, nbytes in launches:
            out.launch_points.append((nbytes, contention.compute_work(a, e, others) if jobs is not None else e - a))
    return out


def warm_gaps(trace: Trace, steady: set[int]) -> dict[int, list[int]]:
    """Comm-free gaps of the pre-steady synced steps: the single bucket reduces after backward."""
    warm: dict[int, list[int]] = {}
    for r in trace.ranks:
        for it in r.iterations:
            if it.sync and it.iteration not in steady and it.grad_ready:
                prev, spans = it.backward.start_ns, comm_spans(it)
                for g in sorted((g for g in it.grad_ready if not g.unused), key=lambda g: g.t_ns):
                    if covered_fraction(spans, prev, g.t_ns) < 0.2:
                        warm.setdefault(g.param, []).append(max(0, g.t_ns - prev))
                    prev = g.t_ns
    return warm


def rank_factors(work_by_rank: dict[int, list[float]]) -> dict[int, float]:
    """Each rank's compute speed relative to the typical rank (1.0 = the median rank), keyed as
    ``work_by_rank`` is (``workload_from_trace``: by the simulated rank that plays the recorded one,
    ``noise.simulated_rank``).

    Note [Ranks are not equally fast]: on this 2-core machine some models run their
    backward on one rank up to 1.5x slower than on the other, in every
    configuration of one recording (shuffled, ~34 MB of parameters: rank 1 at 47
    ms vs rank 0 at 32 ms in the calibration run, 55 vs 29 ms in a run whose
    allreduces all come after backward, so it is not communication). Every
    collective waits for the slowest rank, so the simulator plays each rank at its
    own measured backward speed (``SimConfig.backward_scale``, ``measured_backward_scale``)
    instead of the median speed for all.
    """
    med = {r: statistics.median(v) for r, v in work_by_rank.items() if v}
    if len(med) < 2:
        return {}
    typical = statistics.median(med.values())
    return {r: m / typical for r, m in sorted(med.items())} if typical > 0 else {}


def measured_backward_scale(w: Workload, world_size: int) -> dict[int, float]:
    """The recorded ranks' relative speeds, when simulating the recorded world size.

    Note [Ranks are not equally fast]. At another world size there is no rank to
    map them to, and every rank runs at the median speed.
    """
    factors = w.meta.get("rank_factors") or {}
    if w.meta.get("recorded_world_size") != world_size or len(factors) != world_size:
        return {}
    return {int(r): float(f) for r, f in factors.items()}


def comm_spans(it) -> list[tuple[int, int]]:
    """(launch, complete) of the iteration's collectives, the bitmap allreduce included."""
    return [(launch, complete) for _k, launch, complete, _b in contention.collectives(it)]


def unmix_interference(deltas: dict, overlaps: dict, warm: dict) -> tuple[dict, float]:
    """Split gradient gaps into clean compute and a slowdown while comm is in flight.

    Clean time of a param: the median of its gaps that overlapped no collective
    (< 20%), else its smallest gap, including the comm-free gaps of the
    pre-steady iterations (``warm``: iteration 0's single bucket reduces after
    backward, so its backward is comm-free, though warm-up makes it slower). Interference: the excess time of the gaps that
    overlapped communication over the overlapped clean time,
    ``sum(gap - clean) / sum(clean)`` over the gaps >= 20% overlapped (dominated by the long gaps, so the
    near-zero bias gradients do not add noise). Below 5% the effective gaps are
    kept and interference is 0.
    """
    clean, excess, base = {}, 0.0, 0.0
    for p, ds in deltas.items():
        free = [d for d, f in zip(ds, overlaps[p]) if f < 0.2]
        clean[p] = statistics.median(free) if free else min(ds + warm.get(p, []))
        for d, f in zip(ds, overlaps[p]):
            if f >= 0.2:
                excess += d - clean[p]
                base += clean[p]  # the model slows a whole gap that starts during comm
    i = max(0.0, excess / base) if base > 0 else 0.0
    if i < 0.05:
        return deltas, 0.0
    return {p: [c] for p, c in clean.items()}, i


def comm_fraction(it) -> float:
    """Fraction of the backward compute with one of the iteration's buckets in flight."""
    return covered_fraction([(b.launch_ns, b.complete_ns) for b in it.buckets], it.backward.start_ns,
                    it.backward_compute_end_ns)
