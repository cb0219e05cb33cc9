"""A Workload from a recorded trace: what the simulator learns from a real run.

From the steady-state iterations (``ddpsim.analysis.steady_cycles``) of every rank:

- per-parameter gradient compute time: the median over iterations and ranks of
  the gap between a gradient's ready time and the previous one (the first one:
  from the start of backward); the ready order is rank 0's last steady order;
- forward, graph search, loss (forward end -> backward start), finalize (last
  gradient or last allreduce completion -> backward end), optimizer, and the
  gaps around the optimizer and between iterations: medians of the spans;
- the allreduce cost: a least-squares line ``t = a + b·bytes`` through each
  collective's duration, measured from the *last* rank's launch (so waiting for
  a straggler is not counted) or from the completion of the collective
  ``concurrency`` places earlier (gloo's queue), to its completion. The line is
  turned into a ring Link at the recorded world size (``Link.from_fit``);
- jitter: the coefficient of variation of per-rank compute (forward + backward
  compute) over steady iterations, in ``meta['jitter_estimated']``; the CLI uses it
  as the default --jitter for a trace, so run-to-run noise also delays collectives;
- interference: if the trace has no_sync micro-steps, their backward is compute
  without communication, so ``(T_sync / T_nosync - 1) / f`` (f: the fraction of
  synced backward compute with an allreduce in flight) estimates the slowdown,
  and the no_sync per-gradient times are used as the clean compute. Without
  no_sync steps, each gradient gap is split by whether one of the rank's
  collectives was in flight during it (``_unmix_interference``): clean time from
  the gaps without communication, the slowdown from those with it. Below 5% the
  effective gaps are kept and interference is 0.
- shared core (CPU gloo, the default for a real gloo trace): each rank is pinned
  to one core that its gloo threads share (``Link.shared_core``). Then the
  work of a gradient gap is ``integral dt / (1 + m(t))`` and the work of a
  collective ``integral dt / (c(t) + m(t))`` over its span, with ``m(t)`` the
  rank's collectives in flight and ``c(t)`` 1 while backward computes
  (``contention.shared_work``; with more ranks than CPUs the co-located ranks'
  jobs count too): the times each would take alone on the core, which the
  simulator's processor-sharing ``Core`` turns back into contended times. The
  allreduce line is fitted through the collectives' work.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis import comm_end_ns, covered_fraction, steady_cycles
from ddpsim.errors import PartialTraceError
from ddpsim.learn import contention
from ddpsim.learn.linkfit import fit_link, fit_shared_link, launch_line
from ddpsim.sim.replay import recorded_layouts
from ddpsim.sim.workload import ParamSpec, Workload
from ddpsim.trace import Trace

NS = 1e-9


def _med(xs, default=0.0):
    xs = list(xs)
    return statistics.median(xs) if xs else default


def config_from_trace(trace: Trace) -> dict:
    """SimConfig fields that reproduce the recorded run (its DDP options)."""
    opts = dict(trace.meta.get("options") or {})
    out = {"world_size": trace.world_size}
    if opts.get("bucket_cap_mb") is not None:
        out["bucket_cap_mb"] = float(opts["bucket_cap_mb"])
    for k in ("find_unused_parameters", "static_graph"):
        if opts.get(k) is not None:
            out[k] = bool(opts[k])
    if opts.get("no_sync_every"):
        out["no_sync_every"] = max(1, int(opts["no_sync_every"]))
    return out


def replay_config(w: Workload, trace: Trace, **fields):
    """The SimConfig that replays recorded run ``trace`` from workload ``w``.

    ``trace``'s DDP options (``config_from_trace``), its ranks' measured speeds when
    ``w`` was learnt at the same world size (Note [Ranks are not equally fast]),
    then ``fields``.
    """
    from ddpsim.sim.api import SimConfig

    cfg = {**config_from_trace(trace), **fields}
    cfg.setdefault("backward_scale", measured_backward_scale(w, cfg["world_size"]))
    return SimConfig(**cfg)


def uses_shared_core(trace: Trace) -> bool:
    """A recorded gloo trace (CPU ranks pinned to cores), or a simulated one that modelled it."""
    if (trace.meta.get("placement") or {}).get("device") == "cuda":
        return False  # gloo with CUDA tensors: the compute is on the GPU, not the rank's core
    if trace.source == "real" and "backend" in trace.meta:
        return str(trace.meta["backend"]) == "gloo"
    return bool((trace.meta.get("link") or {}).get("shared_core", False))


def workload_from_trace(trace: Trace, concurrency: int | None = None,
                        shared_core: bool | None = None) -> Workload:
    params = sorted((p for p in trace.params if p.index is not None), key=lambda p: p.index)
    steady = {i for c in steady_cycles(trace) for i in c} if any(r.iterations for r in trace.ranks) else set()
    its = [it for r in trace.ranks for it in r.iterations if it.iteration in steady]
    if not any(not g.unused for it in its for g in it.grad_ready):
        its = [it for r in trace.ranks for it in r.iterations]
    if not any(not g.unused for it in its for g in it.grad_ready):
        raise PartialTraceError("the trace has no gradient events (grad_ready): nothing to simulate from")
    if not params:
        seen = sorted({g.param for it in its for g in it.grad_ready})
        params = [_Fake(i) for i in range(max(seen) + 1)]
    sync = [it for it in its if it.sync and it.grad_ready]
    nosync = [it for it in its if not it.sync and it.grad_ready]
    backend = str(trace.meta.get("backend", "gloo"))
    device = "cuda:0" if backend == "nccl" else "cpu"  # rank 0's, whose rebuilt layout wins
    conc = concurrency or (trace.meta.get("link") or {}).get("concurrency") or (2 if backend == "gloo" else 1)
    interference, clean = 0.0, sync or nosync
    shared = uses_shared_core(trace) if shared_core is None else shared_core
    cpus = 0
    if shared:
        flights = contention.flights(trace, sync, conc)
        cpus = contention.pinned_cpus(trace)
        cpus = cpus if 0 < cpus < trace.world_size else 0  # 0: every rank has a core of its own
        if sync:
            link, fit = fit_shared_link(trace, sync, conc, flights, cpus)
        jobs = contention.core_jobs(trace, its, contention.weigh(flights, link, trace.world_size) if sync else {},
                                    cpus)
    if shared and sync:
        pass  # compute is un-mixed below, gap by gap
    elif sync and nosync:
        t_sync = _med(it.backward_compute_end_ns - it.backward.start_ns for it in sync)
        t_ns = _med(it.backward_compute_end_ns - it.backward.start_ns for it in nosync)
        frac = _med(_comm_fraction(it) for it in sync)
        if t_ns > 0 and frac > 0.05:
            interference = max(0.0, (t_sync / t_ns - 1.0) / frac)
            clean = nosync

    deltas: dict[int, list[int]] = {}
    overlaps: dict[int, list[float]] = {}
    rank_of = {id(it): r.rank for r in trace.ranks for it in r.iterations}
    work_by_rank: dict[int, list[float]] = {}  # backward compute per iteration
    launch_points: list[tuple[int, float]] = []  # (bucket bytes, launch cost alone, ns)
    for it in clean:
        prev = it.backward.start_ns
        spans = _comm_spans(it)
        others = jobs.get(id(it), []) if shared else None  # the other jobs on this rank's core
        work = 0.0
        launches = [(b.launch_ns, b.launch_end_ns, b.bytes) for b in it.buckets if b.launch_end_ns is not None]
        for g in sorted((g for g in it.grad_ready if not g.unused), key=lambda g: g.t_ns):
            own = [(a, e) for a, e, _ in launches if prev <= a < g.t_ns]  # Note [Launching costs the autograd thread]
            if shared:
                d = contention.compute_work(prev, g.t_ns, others)
                d = max(0.0, d - sum(contention.compute_work(a, min(e, g.t_ns), others) for a, e in own))
            else:
                d = max(0, g.t_ns - prev - sum(min(e, g.t_ns) - a for a, e in own))
                overlaps.setdefault(g.param, []).append(covered_fraction(spans, prev, g.t_ns))
            deltas.setdefault(g.param, []).append(d)
            work += d
            prev = g.t_ns
        work_by_rank.setdefault(rank_of.get(id(it), 0), []).append(work)
        for a, e, nbytes in launches:
            launch_points.append((nbytes, contention.compute_work(a, e, others) if shared else e - a))
    if clean is sync and interference == 0.0 and not shared:
        warm = {}  # pre-steady synced steps: the single bucket reduces after backward
        for r in trace.ranks:
            for it in r.iterations:
                if it.sync and it.iteration not in steady and it.grad_ready:
                    prev, spans = it.backward.start_ns, _comm_spans(it)
                    for g in sorted((g for g in it.grad_ready if not g.unused), key=lambda g: g.t_ns):
                        if covered_fraction(spans, prev, g.t_ns) < 0.2:
                            warm.setdefault(g.param, []).append(max(0, g.t_ns - prev))
                        prev = g.t_ns
        deltas, interference = _unmix_interference(deltas, overlaps, warm)
    r0ids = {id(x) for x in trace.ranks[0].iterations}
    r0 = [it for it in clean if id(it) in r0ids] or clean
    last = r0[-1]
    order = [g.param for g in sorted((g for g in last.grad_ready if not g.unused), key=lambda g: g.t_ns)]
    order += [p for p in sorted(deltas, reverse=True) if p not in set(order)]
    n = len(params)
    order = [p for p in dict.fromkeys(order) if p < n]  # a parameter ready twice counts once
    unused = sorted(set(range(n)) - set(order))

    def gs_inside(it):
        g = it.graph_search
        return g is not None and g.start_ns >= it.forward.start_ns and g.end_ns <= it.forward.end_ns

    def alone(it, span) -> float:  # the fraction of a span's time that was this rank's own work
        if not shared or span.duration_ns <= 0:
            return 1.0
        return contention.compute_work(span.start_ns, span.end_ns, jobs.get(id(it), [])) / span.duration_ns

    fwd = _med((it.forward.duration_ns - (it.graph_search.duration_ns if gs_inside(it) else 0))
               * alone(it, it.forward) for it in its)
    search = _med(it.graph_search.duration_ns for it in its if it.graph_search)
    pre = _med(max(0, it.backward.start_ns - it.forward.end_ns
                   - (it.graph_search.duration_ns if it.graph_search and not gs_inside(it) else 0)) for it in its)
    finalize = _med(max(0, it.backward.end_ns - max(it.backward_compute_end_ns, comm_end_ns(it) or 0))
                    for it in sync)
    opt_its = [it for it in its if it.optimizer]
    step_gap = _med(max(0, it.optimizer.start_ns - it.backward.end_ns) for it in opt_its)
    opt = _med(it.optimizer.duration_ns * alone(it, it.optimizer) for it in opt_its)
    gaps = []
    for r in trace.ranks:
        for a, b in zip(r.iterations, r.iterations[1:]):
            if a.iteration in steady and b.iteration in steady:
                gaps.append(max(0, b.forward.start_ns - a.end_ns))
    if not (shared and sync):
        link, fit = fit_link(trace, sync, conc)
    launch_fit = launch_line(launch_points)
    computes = [it.forward.duration_ns + it.backward_compute_end_ns - it.backward.start_ns for it in clean]
    jitter = (statistics.pstdev(computes) / statistics.mean(computes)
              if len(computes) >= 3 and statistics.mean(computes) > 0 else 0.0)
    return Workload(
        name=str(trace.meta.get("model", "recorded")),
        params=[ParamSpec(p.index, p.name, p.bytes, p.dtype, list(p.shape), device) for p in params],
        ready_order=order, grad_compute_s=[_med(deltas[p]) * NS for p in order], link=link.with_(
            interference=interference),
        forward_s=fwd * NS, pre_backward_s=pre * NS, graph_search_s=search * NS, finalize_s=finalize * NS,
        step_gap_s=step_gap * NS, optimizer_s=opt * NS, iter_gap_s=_med(gaps) * NS, unused=unused,
        launch_s=launch_fit[0] * NS, launch_s_per_byte=launch_fit[1] * NS,
        meta={"kind": "trace", "source": trace.source, "recorded_world_size": trace.world_size,
              "backend": backend, "steady_iterations": sorted(steady), "comm_fit": fit,
              "recorded_layouts": recorded_layouts(trace),  # Note [Replay the recorded layouts]
              "shared_core": bool(shared and sync),
              "rank_factors": rank_factors(work_by_rank),
              "interference_estimated": interference,
              "jitter_estimated": round(jitter, 4)},
    )


def rank_factors(work_by_rank: dict[int, list[float]]) -> dict[int, float]:
    """Each rank's compute speed relative to the typical rank (1.0 = the median rank).

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


class _Fake:
    def __init__(self, i):
        self.index, self.name, self.bytes, self.dtype, self.shape = i, f"param{i}", 4, "float32", []


def _comm_spans(it) -> list[tuple[int, int]]:
    """(launch, complete) of the iteration's collectives, the bitmap allreduce included."""
    return [(launch, complete) for _k, launch, complete, _b in contention.collectives(it)]


def _unmix_interference(deltas: dict, overlaps: dict, warm: dict) -> tuple[dict, float]:
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


def _comm_fraction(it) -> float:
    """Fraction of the backward compute with one of the iteration's buckets in flight."""
    return covered_fraction([(b.launch_ns, b.complete_ns) for b in it.buckets], it.backward.start_ns,
                    it.backward_compute_end_ns)
