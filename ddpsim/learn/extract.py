"""A Workload from a recorded trace: what the simulator learns from a real run.

From the steady-state iterations (``ddpsim.analysis.steady_cycles``; under Join, shadowed ones too) of each rank:

- per-parameter gradient compute time: the median over iterations and ranks of the gap between a
  gradient's ready time and the previous one (the first one: from the start of backward); the
  ready order is rank 0's last steady order;
- forward, graph search, loss (forward end -> backward start), finalize (last gradient or last
  allreduce completion -> backward end), optimizer, and the gaps around the optimizer and between
  iterations: medians of the spans;
- the allreduce cost: a least-squares line ``t = a + b·bytes`` through each collective's duration,
  measured from the *last* rank's launch (so waiting for a straggler is not counted) or from the
  completion of the collective ``concurrency`` places earlier (gloo's queue), to its completion.
  The line is turned into a ring Link at the recorded world size (``Link.from_fit``);
- jitter: the coefficient of variation of per-rank compute (forward + backward compute) between the ranks of
  each steady iteration (Note [Only rank-to-rank noise makes ranks wait]), in ``meta['jitter_estimated']``;
  the CLI's default --jitter for a trace, so that noise delays collectives;
- interference: if the trace has no_sync micro-steps, their backward is compute without communication, so
  ``(T_sync / T_nosync - 1) / f`` (f: the fraction of synced backward compute with an allreduce in flight)
  estimates the slowdown, and the no_sync per-gradient times are used as the clean compute. Without no_sync
  steps, each gradient gap is split by whether one of the rank's collectives was in flight during it
  (``gradients.unmix_interference``): clean time from the gaps without communication, the slowdown from
  those with it. Below 5% the effective gaps are kept and interference is 0.
- shared core (CPU gloo, the default for a real gloo trace): each rank is pinned to one core that
  its gloo threads share (``Link.shared_core``). Then the work of a gradient gap is ``integral dt
  / (1 + m(t))`` and the work of a collective ``integral dt / (c(t) + m(t))`` over its span, with
  ``m(t)`` the rank's collectives in flight and ``c(t)`` 1 while backward computes
  (``contention.shared_work``; with more ranks than CPUs the co-located ranks' jobs count too):
  the times each would take alone on the core, which the simulator's processor-sharing ``Core``
  turns back into contended times. The allreduce line is fitted through the collectives' work.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis import comm_end_ns, steady_cycles
from ddpsim.errors import PartialTraceError
from ddpsim.learn import alone, contention, hardware, hookrates
from ddpsim.learn.buffers import broadcast_seconds, buffer_bytes
from ddpsim.learn.gradients import (comm_fraction, gradient_gaps, measured_backward_scale, rank_factors,
                                     unmix_interference, warm_gaps)
from ddpsim.learn.linkfit import fit_link, fit_shared_link, launch_line
from ddpsim.learn.noise import recorded_ranks, simulated_rank, steps_repeat
from ddpsim.sim.comm_hooks import CommHook
from ddpsim.sim.replay import cap_list_field, recorded_layouts, replay_caps
from ddpsim.sim.workload import ParamSpec, Workload
from ddpsim.trace import Trace
from ddpsim.trace.types import Span
from ddpsim.trace.profile_sizes import UnknownSizesError, unknown_sizes

NS = 1e-9
DRAWN_ITERS = 20  # synced steps a prediction with drawn rank noise simulates by default (not in torch)
STEADY_ITERS = 6  # synced steps where they repeat exactly (``noise.steps_repeat``): more give the same numbers


def _med(xs, default=0.0):
    return statistics.median(xs) if (xs := list(xs)) else default


def config_from_trace(trace: Trace) -> dict:
    """SimConfig fields that reproduce the recorded run (its DDP options)."""
    opts = dict(trace.meta.get("options") or {})
    out = {"world_size": trace.world_size}
    if opts.get("bucket_cap_mb") is not None:
        out["bucket_cap_mb"] = float(opts["bucket_cap_mb"])
    out.update(cap_list_field(opts))  # bucket_cap_mb_list, where the run gave one
    for k in ("find_unused_parameters", "static_graph", "broadcast_buffers", "skip_all_reduce_unused_params", "last_bucket_small"):
        if opts.get(k) is not None:
            out[k] = bool(opts[k])
    if opts.get("no_sync_every"):
        out["no_sync_every"] = max(1, int(opts["no_sync_every"]))
    if known_hook(opts.get("comm_hook")):  # record --comm-hook: what the run's hook sent (sim/comm_hooks.py)
        out["comm_hook"] = opts["comm_hook"]
        out.update({k: int(opts[k]) for k in ("powersgd_rank", "powersgd_start_iter") if opts.get(k) is not None})
    out.update(hookrates.recorded(trace))  # what a hook would cost in the recorded ranks
    if opts.get("join"):  # the recorded uneven inputs need every recorded micro-step (sim/join.py)
        out.update(join=True, uneven=int(opts.get("uneven") or 0),
                   iters=max(1, int(opts["iters"]) // out.get("no_sync_every", 1)))
    return out


def known_hook(name) -> bool:
    """A recorded comm hook the simulator models (a user's own ``path.py:factory`` is not: replayed
    as DDP's own allreduce)."""
    try:
        return isinstance(name, str) and CommHook.parse(name) is not None
    except ValueError:
        return False


def synced_steps(trace: Trace) -> int:
    """How many synced steps (optimizer steps) the recording made: what a replay simulates."""
    return max(1, max((sum(it.sync for it in r.iterations) for r in trace.ranks), default=1))


def replay_config(w: Workload, trace: Trace, noise: str = "recorded", **fields):
    """The SimConfig that replays recorded run ``trace`` (its DDP options, ``config_from_trace``)
    from workload ``w``, then ``fields``.

    The ranks' speeds: at the world size ``w`` was learnt at, with ``noise="recorded"``, each
    recorded rank as it was in each recorded micro-step, over as many steps as were recorded
    (Note [Replay the recorded ranks' speeds] in noise.py); otherwise (another world size,
    ranks that shared CPU cores, or ``noise="drawn"``) the recorded ranks' median speeds where
    the world size matches (Note [Ranks are not equally fast]) and a drawn rank noise of the
    measured spread (``jitter_estimated``, Note [Only rank-to-rank noise makes ranks wait]), over
    ``DRAWN_ITERS`` steps (``STEADY_ITERS`` where the steps after the rebuild and PowerSGD's set-up repeat
    exactly). On other GPU hardware (``hardware="h100-ib400"``), its collectives there: learn/hardware.py.
    """
    from ddpsim.sim.api import SimConfig

    if noise not in ("recorded", "drawn"):
        raise ValueError(f"noise must be 'recorded' or 'drawn', not {noise!r}")
    cfg = hookrates.in_replay(w, hardware.in_replay(w, trace, {**replay_caps(config_from_trace(trace), fields), **fields}))
    if noise == "recorded" and "jitter" not in fields and replays_recorded_ranks(w, cfg["world_size"]):
        cfg.setdefault("recorded_ranks", {int(r): v for r, v in w.meta["recorded_ranks"].items()})
        cfg.setdefault("iters", int(w.meta.get("recorded_steps") or synced_steps(trace)))
        if (scale := alone.noop_scale(w, cfg.get("comm_hook"), cfg["world_size"])) is not None:
            cfg.setdefault("synced_backward_scale", scale)  # Note [A run without collectives computes alone]
        return SimConfig(**cfg)
    cfg.setdefault("backward_scale", measured_backward_scale(w, cfg["world_size"]))
    # one rank waits for nobody: rank-to-rank noise only delays a collective it shares
    cfg.setdefault("jitter", float(w.meta.get("jitter_estimated", 0.0)) if cfg["world_size"] > 1 else 0.0)
    cfg.setdefault("iters", STEADY_ITERS if steps_repeat(w, cfg, STEADY_ITERS) else DRAWN_ITERS)
    return SimConfig(**cfg)


def replays_recorded_ranks(w: Workload, world_size: int) -> bool:
    """Whether ``replay_config`` replays each recorded rank's own speeds at ``world_size`` (by
    default): at the recorded world size, for ranks that had a core each; otherwise it draws rank
    noise of the measured spread (the What-if page names which: ``ddpsim/app/waiting.py``)."""
    recorded = w.meta.get("recorded_ranks") or {}
    return bool(recorded) and len(recorded) == world_size == w.meta.get("recorded_world_size") and not w.link.cpus


def uses_shared_core(trace: Trace) -> bool:
    """A recorded gloo trace (CPU ranks pinned to cores), or a simulated one that modelled it."""
    if (trace.meta.get("placement") or {}).get("device") == "cuda":
        return False  # gloo with CUDA tensors: the compute is on the GPU, not the rank's core
    if trace.source == "real" and "backend" in trace.meta:
        return str(trace.meta["backend"]) == "gloo"
    return bool((trace.meta.get("link") or {}).get("shared_core", False))


def workload_from_trace(trace: Trace, concurrency: int | None = None,
                        shared_core: bool | None = None) -> Workload:
    """The Workload that reproduces recorded run ``trace`` (see the module docstring). A trace
    whose sizes are unknown (a profile without shapes) is refused: no network is fitted from it."""
    if (why := unknown_sizes(trace)) is not None:
        raise UnknownSizesError(why)
    params, steady, its = _samples(trace)
    sync = [it for it in its if it.sync and it.grad_ready]
    nosync = [it for it in its if not it.sync and it.grad_ready]
    backend = str(trace.meta.get("backend", "gloo"))
    conc = concurrency or (trace.meta.get("link") or {}).get("concurrency") or (2 if backend == "gloo" else 1)
    shared = uses_shared_core(trace) if shared_core is None else shared_core
    jobs, link, fit = _core_jobs(trace, its, sync, conc) if shared else (None, None, None)
    interference, clean = _nosync_interference(sync, nosync) if not (shared and sync) else (0.0, sync)
    gaps = gradient_gaps(trace, clean, jobs)
    deltas = gaps.deltas
    if clean is sync and interference == 0.0 and not shared:
        deltas, interference = unmix_interference(deltas, gaps.overlaps, warm_gaps(trace, steady))
    order, unused = _ready_order(trace, clean, deltas, len(params))
    if not (shared and sync):
        link, fit = fit_link(trace, sync, conc)
    launch_fit = launch_line(gaps.launch_points)
    device = "cuda:0" if backend == "nccl" else "cpu"  # rank 0's, whose rebuilt layout wins
    return Workload(
        name=str(trace.meta.get("model", "recorded")),
        params=[ParamSpec(p.index, p.name, p.bytes, p.dtype, list(p.shape), device) for p in params],
        ready_order=order, grad_compute_s=[_med(deltas[p]) * NS for p in order],
        link=link.with_(interference=interference), unused=unused,
        **_phase_times(trace, its, sync, steady, jobs),
        launch_s=launch_fit[0] * NS, launch_s_per_byte=launch_fit[1] * NS, buffer_bytes=buffer_bytes(trace),
        buffer_broadcast_s=broadcast_seconds(trace),
        meta={"kind": "trace", "source": trace.source, "recorded_world_size": trace.world_size,
              "backend": backend, "steady_iterations": sorted(steady), "comm_fit": fit,
              **({"no_network": fit["no_network"]} if fit and "no_network" in fit else {}),
              "recorded_layouts": recorded_layouts(trace),  # Note [Replay the recorded layouts]
              "shared_core": bool(shared and sync),
              # Note [Ranks that share cores slow the ring]: the network at other world sizes (plan.resolve_link)
              **({"calibration": trace.meta["calibration"]} if shared and sync
                 and isinstance(trace.meta.get("calibration"), dict) else {}),
              "rank_factors": rank_factors({simulated_rank(trace)[r]: v for r, v in gaps.work_by_rank.items()}),
              "recorded_ranks": recorded_ranks(trace, steady),  # Note [Replay the recorded ranks' speeds]
              "recorded_steps": synced_steps(trace),
              "interference_estimated": interference,
              # too few clean iterations (a short no_sync run): every steady one, still rank against rank
              "jitter_estimated": round(_jitter(clean) if len(clean) >= 3 else _jitter(its, min_groups=1), 4)},
    )


def _samples(trace: Trace) -> tuple[list, set[int], list]:
    """(parameters, steady iteration numbers, the iterations to learn from: steady ones of every rank)."""
    params = sorted((p for p in trace.params if p.index is not None), key=lambda p: p.index)
    steady = {i for c in steady_cycles(trace, shadowed=True) for i in c} if any(r.iterations for r in trace.ranks) else set()
    its = [it for r in trace.ranks for it in r.iterations if it.iteration in steady]
    if not any(not g.unused for it in its for g in it.grad_ready):
        its = [it for r in trace.ranks for it in r.iterations]
    if (failed := [r for r in trace.ranks if r.error]) and not any(it.buckets for it in its):  # died before one
        raise PartialTraceError(f"the recording failed before any bucket's allreduce (rank {failed[0].rank}: "
                                f"{failed[0].error[:160]}): nothing to simulate from; record again once it runs")
    if not any(not g.unused for it in its for g in it.grad_ready):
        raise PartialTraceError("the trace has no gradient events (grad_ready): nothing to simulate from")
    if not params:  # each bucket's bytes are its parameters' bytes: without the table none is known
        raise PartialTraceError("the trace has no parameter table (params, with each parameter's index and "
                                "bytes): the buckets' sizes are unknown, nothing to simulate from")
    return params, steady, its


def _core_jobs(trace: Trace, its, sync, conc: int) -> tuple[dict, object, dict | None]:
    """Shared core: (the other jobs on each iteration's core, the link fitted through the
    collectives' work, its fit) (``contention``)."""
    flights = contention.flights(trace, sync, conc)
    cpus = contention.pinned_cpus(trace)
    cpus = cpus if 0 < cpus < trace.world_size else 0  # 0: every rank has a core of its own
    link = fit = None
    if sync:
        link, fit = fit_shared_link(trace, sync, conc, flights, cpus)
    weights = contention.weigh(flights, link, trace.world_size) if sync else {}
    return contention.core_jobs(trace, its, weights, cpus), link, fit


def _nosync_interference(sync, nosync) -> tuple[float, list]:
    """(interference, the iterations whose gaps are clean compute), from no_sync steps if any."""
    if sync and nosync:
        t_sync = _med(it.backward_compute_end_ns - it.backward.start_ns for it in sync)
        t_ns = _med(it.backward_compute_end_ns - it.backward.start_ns for it in nosync)
        frac = _med(comm_fraction(it) for it in sync)
        if t_ns > 0 and frac > 0.05:
            return max(0.0, (t_sync / t_ns - 1.0) / frac), nosync
    return 0.0, sync or nosync


def _ready_order(trace: Trace, clean, deltas: dict, n: int) -> tuple[list[int], list[int]]:
    """(rank 0's last gradient-ready order, then any other parameter seen; the unused ones)."""
    r0ids = {id(x) for x in trace.ranks[0].iterations}
    r0 = [it for it in clean if id(it) in r0ids] or clean
    last = r0[-1]
    order = [g.param for g in sorted((g for g in last.grad_ready if not g.unused), key=lambda g: g.t_ns)]
    order += [p for p in sorted(deltas, reverse=True) if p not in set(order)]
    order = [p for p in dict.fromkeys(order) if p < n]  # a parameter ready twice counts once
    return order, sorted(set(range(n)) - set(order))


def _phase_times(trace: Trace, its, sync, steady: set[int], jobs: dict | None) -> dict:
    """Workload fields for the phases around backward (s): medians over ``its``."""
    def gs_inside(it):
        g = it.graph_search
        return g is not None and g.start_ns >= it.forward.start_ns and g.end_ns <= it.forward.end_ns

    def alone(it, span) -> float:  # the fraction of a span's time that was this rank's own work
        if jobs is None or span.duration_ns <= 0:
            return 1.0
        return contention.compute_work(span.start_ns, span.end_ns, jobs.get(id(it), [])) / span.duration_ns

    opt_its = [it for it in its if it.optimizer]
    gaps = [max(0, b.forward.start_ns - a.end_ns) for r in trace.ranks
            for a, b in zip(r.iterations, r.iterations[1:]) if a.iteration in steady and b.iteration in steady]
    return {
        "forward_s": _med((it.forward_compute_ns - (it.graph_search.duration_ns if gs_inside(it) else 0))
                          * alone(it, Span(it.forward_compute_start_ns, it.forward.end_ns)) for it in its) * NS,
        "graph_search_s": _med(it.graph_search.duration_ns for it in its if it.graph_search) * NS,
        "pre_backward_s": _med(max(0, it.backward.start_ns - it.forward.end_ns - (
            it.graph_search.duration_ns if it.graph_search and not gs_inside(it) else 0)) for it in its) * NS,
        "finalize_s": _med(max(0, it.backward.end_ns - max(it.backward_compute_end_ns, comm_end_ns(it) or 0))
                           for it in sync) * NS,
        "step_gap_s": _med(max(0, it.optimizer.start_ns - it.backward.end_ns) for it in opt_its) * NS,
        "optimizer_s": _med(it.optimizer.duration_ns * alone(it, it.optimizer) for it in opt_its) * NS,
        "iter_gap_s": _med(gaps) * NS,
    }


def _jitter(clean, min_groups: int = 3) -> float:
    """The rank noise: the coefficient of variation of per-iteration compute (forward +
    backward compute) *between ranks in the same iteration*; with one rank, none (0).

    Note [Only rank-to-rank noise makes ranks wait]: the simulator draws each rank's
    compute multiplier ``1 + jitter·z`` independently, and a collective waits for the
    slowest rank. A slow spell of the machine slows every rank in the same iteration
    and makes nobody wait, so the spread over all iterations of all ranks (what this
    used to be) counted it as rank noise. Two launches of the same 2-rank run,
    recorded at the same time taking turns (2026-11-24), had spreads of 0.05 and 0.22
    for transformer that way, and 0.04 and 0.06 within iterations; at 4 ranks every
    extra 0.1 of jitter moves a prediction by several percent. So the variance is
    taken across the ranks of each iteration (the sample variance, averaged over
    iterations) and divided by the mean compute; with fewer than ``min_groups`` iterations
    seen on several ranks, the spread over all of them. One rank shows no rank-to-rank spread:
    0 (its iterations' spread made a 1-rank H100 import wait 6.3 of 72 ms at 8 ranks).
    """
    computes = [it.forward_compute_ns + it.backward_compute_end_ns - it.backward.start_ns for it in clean]
    mean = statistics.mean(computes) if len(computes) >= 3 else 0.0
    if mean <= 0:
        return 0.0
    by_iteration: dict[int, list[int]] = {}
    for it, c in zip(clean, computes):
        by_iteration.setdefault(it.iteration, []).append(c)
    within = [statistics.variance(v) for v in by_iteration.values() if len(v) >= 2]
    spread = statistics.mean(within) ** 0.5 if len(within) >= min(min_groups, 3) else statistics.pstdev(computes)
    return spread / mean if within else 0.0  # within empty: no iteration on two ranks, nothing to learn
