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
  (``_shared_work``): the times each would take alone on the core, which the
  simulator's processor-sharing ``Core`` turns back into contended times. The
  allreduce line is fitted through the collectives' work.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis import comm_end_ns, steady_cycles
from ddpsim.sim.network import Link
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


def uses_shared_core(trace: Trace) -> bool:
    """A recorded gloo trace (CPU ranks pinned to cores), or a simulated one that modelled it."""
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
        raise ValueError("the trace has no gradient events (grad_ready): nothing to simulate from")
    if not params:
        seen = sorted({g.param for it in its for g in it.grad_ready})
        params = [_Fake(i) for i in range(max(seen) + 1)]
    sync = [it for it in its if it.sync and it.grad_ready]
    nosync = [it for it in its if not it.sync and it.grad_ready]
    backend = str(trace.meta.get("backend", "gloo"))
    conc = concurrency or (trace.meta.get("link") or {}).get("concurrency") or (2 if backend == "gloo" else 1)
    interference, clean = 0.0, sync or nosync
    shared = uses_shared_core(trace) if shared_core is None else shared_core
    if shared:
        flights = _flights(trace, sync, conc)
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
    for it in clean:
        prev = it.backward.start_ns
        spans = _comm_spans(it)
        inflight = flights.get(id(it), []) if shared else None
        for g in sorted((g for g in it.grad_ready if not g.unused), key=lambda g: g.t_ns):
            if shared:
                deltas.setdefault(g.param, []).append(max(0.0, _shared_work(prev, g.t_ns, inflight, 1)))
            else:
                deltas.setdefault(g.param, []).append(max(0, g.t_ns - prev))
                overlaps.setdefault(g.param, []).append(_overlap(spans, prev, g.t_ns))
            prev = g.t_ns
    if clean is sync and interference == 0.0 and not shared:
        warm = {}  # pre-steady synced steps: the single bucket reduces after backward
        for r in trace.ranks:
            for it in r.iterations:
                if it.sync and it.iteration not in steady and it.grad_ready:
                    prev, spans = it.backward.start_ns, _comm_spans(it)
                    for g in sorted((g for g in it.grad_ready if not g.unused), key=lambda g: g.t_ns):
                        if _overlap(spans, prev, g.t_ns) < 0.2:
                            warm.setdefault(g.param, []).append(max(0, g.t_ns - prev))
                        prev = g.t_ns
        deltas, interference = _unmix_interference(deltas, overlaps, warm)
    r0ids = {id(x) for x in trace.ranks[0].iterations}
    r0 = [it for it in clean if id(it) in r0ids] or clean
    last = r0[-1]
    order = [g.param for g in sorted((g for g in last.grad_ready if not g.unused), key=lambda g: g.t_ns)]
    order += [p for p in sorted(deltas, reverse=True) if p not in set(order)]
    n = len(params)
    order = [p for p in order if p < n]
    unused = sorted(set(range(n)) - set(order))

    def gs_inside(it):
        g = it.graph_search
        return g is not None and g.start_ns >= it.forward.start_ns and g.end_ns <= it.forward.end_ns

    fwd = _med((it.forward.duration_ns - (it.graph_search.duration_ns if gs_inside(it) else 0)) for it in its)
    search = _med(it.graph_search.duration_ns for it in its if it.graph_search)
    pre = _med(max(0, it.backward.start_ns - it.forward.end_ns
                   - (it.graph_search.duration_ns if it.graph_search and not gs_inside(it) else 0)) for it in its)
    finalize = _med(max(0, it.backward.end_ns - max(it.backward_compute_end_ns, comm_end_ns(it) or 0))
                    for it in sync)
    opt_its = [it for it in its if it.optimizer]
    step_gap = _med(max(0, it.optimizer.start_ns - it.backward.end_ns) for it in opt_its)
    opt = _med(it.optimizer.duration_ns for it in opt_its)
    gaps = []
    for r in trace.ranks:
        for a, b in zip(r.iterations, r.iterations[1:]):
            if a.iteration in steady and b.iteration in steady:
                gaps.append(max(0, b.forward.start_ns - a.end_ns))
    if shared and sync:
        link, fit = fit_shared_link(trace, sync, conc, flights)
    else:
        link, fit = fit_link(trace, sync, conc)
    computes = [it.forward.duration_ns + it.backward_compute_end_ns - it.backward.start_ns for it in clean]
    jitter = (statistics.pstdev(computes) / statistics.mean(computes)
              if len(computes) >= 3 and statistics.mean(computes) > 0 else 0.0)
    return Workload(
        name=str(trace.meta.get("model", "recorded")),
        params=[ParamSpec(p.index, p.name, p.bytes, p.dtype, list(p.shape)) for p in params],
        ready_order=order, grad_compute_s=[_med(deltas[p]) * NS for p in order], link=link.with_(
            interference=interference),
        forward_s=fwd * NS, pre_backward_s=pre * NS, graph_search_s=search * NS, finalize_s=finalize * NS,
        step_gap_s=step_gap * NS, optimizer_s=opt * NS, iter_gap_s=_med(gaps) * NS, unused=unused,
        meta={"kind": "trace", "source": trace.source, "recorded_world_size": trace.world_size,
              "backend": backend, "steady_iterations": sorted(steady), "comm_fit": fit,
              "shared_core": bool(shared and sync),
              "interference_estimated": interference,
              "jitter_estimated": round(jitter, 4)},
    )


class _Fake:
    def __init__(self, i):
        self.index, self.name, self.bytes, self.dtype, self.shape = i, f"param{i}", 4, "float32", []


def _comm_spans(it) -> list[tuple[int, int]]:
    spans = [(b.launch_ns, b.complete_ns) for b in it.buckets]
    if it.bitmap_allreduce:
        spans.append((it.bitmap_allreduce.launch_ns, it.bitmap_allreduce.complete_ns))
    return spans


def _overlap(spans, lo: int, hi: int) -> float:
    """Fraction of [lo, hi] with one of this rank's collectives in flight."""
    if hi <= lo:
        return 0.0
    cut = sorted((max(lo, s), min(hi, e)) for s, e in spans if e > lo and s < hi)
    covered, end = 0, lo
    for s, e in cut:
        s = max(s, end)
        if e > s:
            covered += e - s
            end = e
    return covered / (hi - lo)


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


def _flights(trace: Trace, sync_its, concurrency: int) -> dict[int, list[tuple[int, int, int]]]:
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
                for key, launch, _c, _b in _collectives(it):
                    k = (it.iteration, key)
                    last[k] = max(last.get(k, launch), launch)
    out = {}
    for it in sync_its:
        spans, ends = [], []
        for key, launch, complete, nbytes in _collectives(it):
            start = last[(it.iteration, key)]
            if len(ends) >= concurrency:
                start = max(start, sorted(ends)[-concurrency])
            start = min(start, complete)
            ends.append(complete)
            spans.append((start, complete, nbytes))
        out[id(it)] = spans
    return out


def _collectives(it):
    out = [(b.bucket, b.launch_ns, b.complete_ns, b.bytes) for b in sorted(it.buckets, key=lambda b: b.launch_ns)]
    if it.bitmap_allreduce:
        c = it.bitmap_allreduce
        out.append((10 ** 9, c.launch_ns, c.complete_ns, c.bytes))
    return out


def _shared_work(lo: float, hi: float, spans, base: int, compute: tuple | None = None) -> float:
    """Work done in [lo, hi] by one job on a processor-sharing core (ns).

    ``spans``: (start, end, ...) of the collectives running on the core; the job
    gets ``1 / (base + in-flight collectives + [t in compute])`` of the core.
    """
    if hi <= lo:
        return 0.0
    cuts = {lo, hi}
    for sp in spans:
        for t in sp[:2]:
            if lo < t < hi:
                cuts.add(t)
    if compute:
        cuts.update(t for t in compute if lo < t < hi)
    pts = sorted(cuts)
    work = 0.0
    for a, b in zip(pts, pts[1:]):
        mid = (a + b) / 2
        n = base + sum(1 for sp in spans if sp[0] <= mid < sp[1])
        if compute and compute[0] <= mid < compute[1]:
            n += 1
        work += (b - a) / max(n, 1)
    return work


def fit_shared_link(trace: Trace, sync_its, concurrency: int, flights) -> tuple[Link, dict]:
    """The allreduce line through each collective's work alone on the core (shared core)."""
    by_size: dict[int, list[float]] = {}
    for it in sync_its:
        spans = flights.get(id(it), [])
        compute = (it.backward.start_ns, it.backward_compute_end_ns)
        for s, e, nbytes in spans:
            by_size.setdefault(nbytes, []).append(_shared_work(s, e, spans, 0, compute) * NS)
    k = trace.world_size
    cal = trace.meta.get("calibration")
    if isinstance(cal, dict) and cal.get("world_size") == k and "intercept_s" in cal:
        # Note [Calibrate alone]: the shared-core model needs each allreduce's cost
        # *alone*; `ddpsim calibrate` measures exactly that over many sizes, where a
        # trace has only its few bucket sizes to fit a line through.
        a, b = float(cal["intercept_s"]), float(cal["s_per_byte"])
        link = Link.from_fit(a, b, k, concurrency=concurrency, shared_core=True,
                             name=f"shared-core, gloo calibration (k={k})")
        return link, {"from": "meta.calibration (shared core)", "intercept_s": a, "s_per_byte": b,
                      "world_size": k}
    a, b = fit_line([(x, statistics.median(ys)) for x, ys in by_size.items() for _ in ys])
    if len(by_size) < 2:  # one size: a line through the origin
        a, b = 0.0, (statistics.median(next(iter(by_size.values()))) / next(iter(by_size))) if by_size else 0.0
    link = Link.from_fit(a, b, k, concurrency=concurrency, shared_core=True,
                         name=f"shared-core fit from trace (k={k})")
    return link, {"from": "trace (shared core)", "intercept_s": a, "s_per_byte": b,
                  "points": sum(len(v) for v in by_size.values()), "world_size": k}


def _comm_fraction(it) -> float:
    lo, hi = it.backward.start_ns, it.backward_compute_end_ns
    if hi <= lo:
        return 0.0
    covered, cur = 0, None
    for s, e in sorted((max(lo, b.launch_ns), min(hi, b.complete_ns)) for b in it.buckets):
        if e <= s:
            continue
        if cur and s <= cur[1]:
            cur[1] = max(cur[1], e)
        else:
            covered += (cur[1] - cur[0]) if cur else 0
            cur = [s, e]
    covered += (cur[1] - cur[0]) if cur else 0
    return covered / (hi - lo)


def collective_points(trace: Trace, sync_its, concurrency: int) -> list[tuple[int, float]]:
    """(bytes, seconds) per collective: from the last launch (or a free slot) to completion."""
    by = {}
    for it in sync_its:
        for b in it.buckets:
            by.setdefault((it.iteration, b.bucket), []).append((b.launch_ns, b.complete_ns, b.bytes))
        if it.bitmap_allreduce:
            c = it.bitmap_allreduce
            by.setdefault((it.iteration, 10 ** 9), []).append((c.launch_ns, c.complete_ns, c.bytes))
    points, done = [], {}
    for key in sorted(by):
        evs = by[key]
        launch, complete, nbytes = max(e[0] for e in evs), max(e[1] for e in evs), evs[0][2]
        prior = done.setdefault(key[0], [])
        start = max(launch, prior[-concurrency]) if len(prior) >= concurrency else launch
        prior.append(complete)
        points.append((nbytes, max(0, complete - start) * NS))
    return points


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


def fit_link(trace: Trace, sync_its, concurrency: int) -> tuple[Link, dict]:
    points = collective_points(trace, sync_its, concurrency)
    k = trace.world_size
    by_size: dict[int, list[float]] = {}
    for x, y in points:  # robust: one median per message size, weighted by its count
        by_size.setdefault(x, []).append(y)
    a, b = fit_line([(x, statistics.median(ys)) for x, ys in by_size.items() for _ in ys])
    cal = trace.meta.get("calibration")
    if (len({p[0] for p in points}) < 2 or k < 2) and isinstance(cal, dict) and "alpha_s" in cal:
        link = Link(alpha_s=float(cal["alpha_s"]), bandwidth_Bps=float(cal["bandwidth_Bps"]),
                    concurrency=concurrency, name="calibration")
        return link, {"from": "meta.calibration", **cal}
    link = Link.from_fit(a, b, k, concurrency=concurrency, name=f"fit from trace (k={k})")
    return link, {"from": "trace", "intercept_s": a, "s_per_byte": b, "points": len(points),
                  "world_size": k}
