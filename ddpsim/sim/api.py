"""``simulate(workload_or_trace, config) -> (Trace, summary)``.

Rank groups (how thousands of ranks stay fast)
----------------------------------------------
A collective starts when its *last* rank launches it, so what matters for timing
is the slowest rank. Ranks that behave identically are one actor:

- no jitter: every non-straggler rank is identical, so one actor stands for all
  of them (exact); each straggler is its own actor.
- jitter (a per-rank, per-micro-step compute multiplier ``1 + jitter·z``,
  z ~ N(0,1), seeded): up to ``max_explicit_ranks`` ranks are simulated one by
  one. Beyond that, rank 0 and a seeded sample of ``sample_ranks`` ranks are
  explicit, and the remaining n ranks are one *group* actor whose multiplier is
  the maximum of n draws, sampled directly as ``1 + jitter·Phi^-1(U^(1/n))``.
  Because every launch time grows with the multiplier, the group actor launches
  each bucket exactly when the slowest member would: exact for synced steps.
  Across no_sync micro-steps (no collective re-aligns the ranks) it is an
  upper bound, since the max of sums is at most the sum of maxes.

The output trace holds only the included ranks (meta.ranks_included); the group
actor is not a real rank and is described in meta.rank_groups.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import asdict, dataclass, field

import simpy

from ddpsim.analysis import summarize
from ddpsim.sim import network
from ddpsim.sim.budget import (DEFAULT_MAX_EVENTS, RUN_EVENTS_PER_ESTIMATED, STRAGGLER_MAX,
                               SimulationTooLarge, check_ranges, count_actors, estimate_events, run_bounded)
from ddpsim.sim.model import Actor, Model, Plan
from ddpsim.sim.model import rank as model_rank
from ddpsim.sim.replay import replayed
from ddpsim.sim.workload import (ORDERS, Workload, caps_bytes, construction_layout,
                                 ordered_layout, param_order)
from ddpsim.trace import (Bucket, BucketEvent, Collective, GradReady, Iteration, Layout, Param,
                          RankTrace, Span, Trace)


@dataclass
class SimConfig:
    """The DDP options and what-ifs of one simulation (None: keep the workload's)."""

    world_size: int = 8
    iters: int = 6  # synced steps (optimizer steps); micro-steps = iters * no_sync_every
    bucket_cap_mb: float | None = None  # None: torch's default 25 MiB with a 1 MiB first bucket
    first_bucket_cap_mb: float | None = None  # override the first bucket's cap
    find_unused_parameters: bool = False
    static_graph: bool = False
    order: str | list = "torch"  # torch | reverse | definition | ready | random | [indices]
    no_sync_every: int = 1
    naive: bool = False  # per-parameter allreduce after backward (no buckets, no overlap)
    overlap: bool = False  # per-parameter allreduce from each gradient's hook (no buckets; OverlapDDP)
    seed: int = 0
    jitter: float = 0.0  # coefficient of variation of per-micro-step compute time
    stragglers: dict = field(default_factory=dict)  # rank -> compute slowdown factor
    backward_scale: dict = field(default_factory=dict)  # rank -> multiplier on its backward only (measured)
    bandwidth_gbps: float | None = None
    latency_us: float | None = None
    algo: str | None = None
    concurrency: int | None = None
    interference: float | None = None
    shared_core: bool | None = None  # None: the workload's; an explicit interference turns it off
    max_explicit_ranks: int = 64
    sample_ranks: int = 4
    trace_ranks: int = 8  # at most this many non-straggler ranks in the output trace
    max_events: int = DEFAULT_MAX_EVENTS  # refuse simulations estimated to need more model events (not in torch)
    time_limit_s: float | None = None  # stop a simulation running longer than this (seconds); None: no limit

    def validate(self) -> None:
        def integer(v, name, lo):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, not {v!r}")
        integer(self.world_size, "world size", 1)
        integer(self.iters, "iters", 1)
        integer(self.no_sync_every, "no_sync_every", 1)
        integer(self.max_explicit_ranks, "max_explicit_ranks", 1)
        if self.naive and self.overlap:
            raise ValueError("naive and overlap are two different DDPs: choose one")
        caps_bytes(self.bucket_cap_mb, self.first_bucket_cap_mb)
        if not isinstance(self.order, (list, tuple)) and self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} or a list, not {self.order!r}")
        if not (isinstance(self.jitter, (int, float)) and math.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"jitter must be a finite number >= 0, not {self.jitter!r}")
        if self.bandwidth_gbps is not None:
            network.check_positive(self.bandwidth_gbps, "bandwidth (Gbit/s)")
        if self.latency_us is not None and not (math.isfinite(self.latency_us) and self.latency_us >= 0):
            raise ValueError(f"latency must be a finite number of microseconds >= 0, not {self.latency_us!r}")
        for what, factors in (("straggler", self.stragglers), ("backward_scale", self.backward_scale)):
            for r, fct in factors.items():
                if not (isinstance(r, int) and 0 <= r < self.world_size):
                    raise ValueError(f"{what} rank {r!r} is not in 0..{self.world_size - 1}")
                network.check_positive(fct, f"{what} {r} factor")
                if fct > STRAGGLER_MAX:
                    raise ValueError(f"{what} {r} factor must be at most {STRAGGLER_MAX:g}, not {fct!r}")
        check_ranges(self)


def resolve_link(w: Workload, cfg: SimConfig) -> network.Link:
    link = w.link
    if w.meta.get("hardware"):
        link = network.network_for(w.meta["hardware"], cfg.world_size)
    shared = cfg.shared_core
    if shared is None and cfg.interference is not None:
        shared = False  # an explicit interference picks that contention model (e.g. a GPU network)
    return link.with_(alpha_s=None if cfg.latency_us is None else cfg.latency_us * 1e-6,
                      bandwidth_Bps=None if cfg.bandwidth_gbps is None else network.gbps_to_Bps(cfg.bandwidth_gbps),
                      algo=cfg.algo, concurrency=cfg.concurrency, interference=cfg.interference,
                      shared_core=shared)


def choose_layouts(w: Workload, cfg: SimConfig) -> tuple[list, list[str], list[int]]:
    """(layouts as (buckets, caps), their kinds, synced steps before the switch to the second).

    Follows torch 2.13 (ddp-internals.md) through ``ddpsim.buckets``; a replay of the
    recorded options takes the recording's layouts (Note [Replay the recorded layouts]).
    """
    first, cap = caps_bytes(cfg.bucket_cap_mb, cfg.first_bucket_cap_mb)
    fu, static = cfg.find_unused_parameters, cfg.static_graph
    ready = param_order(w, "ready")
    switch = [2 if static else 1]  # torch rebuilds after 1 (static_graph: 2) synced steps
    if cfg.naive or cfg.overlap:  # one "bucket" per parameter, in gradient-ready order
        return [([[i] for i in ready], [None] * len(ready))], ["naive" if cfg.naive else "overlap"], []
    recorded = replayed(w, cfg)
    if recorded is not None:
        lays, kinds = recorded
        return lays, kinds, switch if len(lays) == 2 else []
    if cfg.order != "torch":
        if cfg.order == "reverse":
            lay = construction_layout(w, first, cap, single=False)
        else:
            lay = ordered_layout(w, param_order(w, cfg.order, cfg.seed), first, cap)
        return [lay], ["construction"], []
    if fu and not static:  # never rebuilt
        return [construction_layout(w, first, cap, single=False)], ["construction"], []
    # a single bucket, rebuilt in ready order
    return ([construction_layout(w, first, cap, single=True), ordered_layout(w, ready, first, cap)],
            ["construction", "rebuilt"], switch)


def plan_layouts(w: Workload, cfg: SimConfig) -> tuple[list, list[Layout], list[Plan]]:
    """Bucket layouts per micro-step (see ``choose_layouts``)."""
    n_micro = cfg.iters * cfg.no_sync_every
    fu, static = cfg.find_unused_parameters, cfg.static_graph
    if w.unused and not (fu or static):
        raise ValueError(f"{len(w.unused)} parameter(s) never receive a gradient (e.g. index "
                         f"{w.unused[0]}); torch fails at the next forward unless "
                         "find_unused_parameters=True")
    lays, kinds, switch = choose_layouts(w, cfg)
    layouts = [b for b, _ in lays]
    plans, syncs, layout_id, trace_layouts = [], 0, 0, []
    sizes = [p.bytes for p in w.params]
    for i in range(n_micro):
        if i == 0 or (switch and syncs == switch[0] and layout_id == 0):
            layout_id = 0 if i == 0 else 1
            buckets, caps = lays[layout_id]
            trace_layouts.append(Layout(i, kinds[layout_id], [
                Bucket(bi, list(b), sum(sizes[j] for j in b), caps[bi]) for bi, b in enumerate(buckets)]))
        sync = (i + 1) % cfg.no_sync_every == 0
        plans.append(Plan(i, sync, layout_id, search=sync and fu and not static,
                          bitmap=sync and fu and not static,
                          mark_unused=bool(w.unused), naive=cfg.naive))
        syncs += sync
    return layouts, trace_layouts, plans


def _factors(rng: random.Random, n: int, jitter: float, base: float, group: int = 1) -> list[float]:
    if jitter == 0:
        return [base] * n
    out = []
    for _ in range(n):
        if group == 1:
            z = rng.gauss(0.0, 1.0)
        else:  # the max of `group` iid normals, by inverting U^(1/group)
            u = min(rng.random() ** (1.0 / group), 1 - 1e-16)
            z = statistics.NormalDist().inv_cdf(max(u, 1e-300))
        out.append(base * max(0.05, 1.0 + jitter * z))
    return out


def plan_actors(cfg: SimConfig, n_micro: int, explicit: bool = False) -> tuple[list[Actor], list[dict]]:
    """The actors that play the ranks: one per rank, or groups of identical ranks.

    ``explicit``: every rank its own actor even without jitter (up to
    ``max_explicit_ranks``), as ranks that share a CPU core need
    (Note [Ranks that share a CPU]).
    """
    world, strag = cfg.world_size, {int(r): float(f) for r, f in cfg.stragglers.items()}
    bscale = {int(r): float(f) for r, f in cfg.backward_scale.items()}
    actors, groups = [], []
    alone = set(strag) | set(bscale)  # ranks with their own speed play alone
    for r in sorted(alone):
        actors.append(Actor(r, 1, _factors(random.Random(f"{cfg.seed}:{r}"), n_micro, cfg.jitter, strag.get(r, 1.0)),
                            record=True, kind="straggler" if r in strag else "measured",
                            backward_scale=bscale.get(r, 1.0)))
    others = [r for r in range(world) if r not in alone] if world <= 100_000 else None
    n_others = world - len(alone)
    if n_others == 0:
        return actors, groups
    first = next(r for r in range(world) if r not in alone)
    if cfg.jitter == 0 and not (explicit and n_others <= cfg.max_explicit_ranks):
        actors.append(Actor(first, n_others, [1.0] * n_micro, record=True, kind="identical"))
        groups.append({"kind": "identical", "count": n_others, "represented_by": first})
    elif n_others <= cfg.max_explicit_ranks:
        for k, r in enumerate(others):
            actors.append(Actor(r, 1, _factors(random.Random(f"{cfg.seed}:{r}"), n_micro, cfg.jitter, 1.0),
                                record=k < cfg.trace_ranks))
    else:
        rng = random.Random(f"{cfg.seed}:sample")
        if others is None:  # a huge world: draw from the rank numbers without listing them
            pool = [r for r in rng.sample(range(first + 1, world), min(world - first - 1, cfg.sample_ranks + len(alone)))
                    if r not in alone]
            sample = [first] + sorted(pool[:min(cfg.sample_ranks, n_others - 1)])
        else:
            sample = [first] + sorted(rng.sample(others[1:], min(cfg.sample_ranks, len(others) - 1)))
        for r in sample:
            actors.append(Actor(r, 1, _factors(random.Random(f"{cfg.seed}:{r}"), n_micro, cfg.jitter, 1.0),
                                record=True, kind="sampled"))
        rest = n_others - len(sample)
        if rest:
            actors.append(Actor(-1, rest, _factors(random.Random(f"{cfg.seed}:group"), n_micro, cfg.jitter,
                                                   1.0, group=rest), record=False, kind="max-of-group"))
            groups.append({"kind": "max-of-group", "count": rest,
                           "note": "jitter multiplier = max of the group's draws; not in ranks"})
    return actors, groups


def simulate(w: Workload, config: SimConfig | None = None, platform=None, **overrides) -> tuple[Trace, dict]:
    """Simulate workload ``w`` under ``config``.

    ``platform``: a factory ``(env, link, world_size, actors) -> platform`` (see
    ``platform.py``); default the one the link describes (``platform_for``).

    Returns (trace with source "simulated", summary). The summary is
    ``ddpsim.analysis.summarize(trace)`` plus world_size, n_buckets, link, events.
    A recorded trace goes through ``ddpsim.learn.simulate``, which learns its workload first.
    """
    require_workload(w)
    cfg = config or SimConfig()
    if overrides:
        cfg = SimConfig(**{**asdict(cfg), **overrides})
    cfg.validate()
    link = resolve_link(w, cfg)
    explicit = bool(link.shared_core and link.cpus)
    estimate = estimate_events(w, cfg, explicit)
    if estimate > cfg.max_events:
        raise SimulationTooLarge(
            f"this simulation needs about {estimate:,} events ({count_actors(cfg, explicit)} rank actor(s) x "
            f"{cfg.iters * cfg.no_sync_every:,} micro-steps x {len(w.ready_order)} gradients); the limit is "
            f"{cfg.max_events:,} (--max-events): simulate fewer --iters or raise the limit")
    layouts, trace_layouts, plans = plan_layouts(w, cfg)
    actors, groups = plan_actors(cfg, len(plans), explicit=explicit)
    t0 = time.perf_counter()
    env = simpy.Environment()
    model = Model(env, w, link, cfg.world_size, layouts, plans, actors,
                  platform and platform(env, link, cfg.world_size, actors))
    for a in model.actors:
        env.process(model_rank(env, model, a))
    run_bounded(env, max(RUN_EVENTS_PER_ESTIMATED * estimate, 10_000), cfg.time_limit_s)
    wall = time.perf_counter() - t0
    simpy_events = next(env._eid)  # simpy numbers every scheduled event
    # model events per actor: gradient-ready events, bucket ready/launch/complete, 4 spans
    model_events = len(actors) * sum(len(w.ready_order) + 4 + (3 * len(layouts[p.layout_id]) if p.sync else 0)
                                     for p in plans)
    trace = build_trace(w, cfg, link, model, trace_layouts, groups)
    trace.meta["layouts_from"] = "recording" if replayed(w, cfg) is not None else "computed"
    summary = summarize(trace)
    summary.update(world_size=cfg.world_size, n_buckets=len(trace_layouts[-1].buckets),
                   link=link.to_dict(), actors=len(actors), simpy_events=simpy_events,
                   model_events=model_events, estimated_events=estimate)
    trace.meta["summary"] = {k: v for k, v in summary.items() if k != "per_bucket"}  # deterministic: no wall time
    summary["sim_wall_s"] = wall  # wall-clock time: in the returned summary only, never in the trace
    return trace, summary


def require_workload(w) -> None:
    """The simulator models DDP on a Workload; learning one from a trace is a layer above."""
    if not isinstance(w, Workload):
        raise TypeError(f"the simulator takes a ddpsim.sim.Workload, not {type(w).__name__}: "
                        "for a recorded trace use ddpsim.learn.simulate / ddpsim.learn.sweep")


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def build_trace(w: Workload, cfg: SimConfig, link, model: Model, layouts: list[Layout],
                groups: list[dict]) -> Trace:
    ranks = []
    for a in model.actors:
        if not a.record:
            continue
        iters = []
        for rec in a.iterations:
            plan = rec["plan"]
            buckets, bitmap = [], None
            for c in rec["colls"]:
                if c.key[1] == "bitmap":
                    bitmap = Collective(_ns(rec["bitmap_launch"]), _ns(c.end), c.nbytes)
                else:
                    ready, launch, end = rec["buckets"][c.key[1]]
                    buckets.append(BucketEvent(c.key[1], c.nbytes, _ns(ready), _ns(launch), _ns(c.end),
                                               None if end is None else _ns(end)))
            opt = rec["opt"]
            iters.append(Iteration(
                plan.iteration, plan.sync, Span(_ns(rec["start"]), _ns(rec["fwd_end"])),
                Span(_ns(rec["bwd"][0]), _ns(rec["bwd"][1])),
                Span(_ns(opt[0]), _ns(opt[1])) if opt is not None else None,
                [GradReady(_ns(t), p, u) for t, p, u in rec["grads"]], buckets,
                Span(*map(_ns, rec["search"])) if rec["search"] else None, bitmap))
        copies = min(a.count, cfg.trace_ranks) if a.kind == "identical" else 1
        for k in range(copies):  # identical ranks share one timeline
            ranks.append(RankTrace(rank=a.rank + k, host="simulated", layouts=layouts, iterations=iters))
    ranks.sort(key=lambda r: r.rank)
    config = asdict(cfg)
    config["stragglers"] = {str(k): v for k, v in cfg.stragglers.items()}
    config["backward_scale"] = {str(k): v for k, v in cfg.backward_scale.items()}
    meta = {"world_size": cfg.world_size, "ranks_included": [r.rank for r in ranks],
            "rank_groups": groups, "simulator": "ddpsim.sim", "config": config,
            "link": link.to_dict(), "workload": {"name": w.name, **w.meta},
            "options": {"bucket_cap_mb": cfg.bucket_cap_mb, "find_unused_parameters": cfg.find_unused_parameters,
                        "static_graph": cfg.static_graph, "no_sync_every": cfg.no_sync_every,
                        "iters": cfg.iters * cfg.no_sync_every}}
    params = [Param(p.index, p.name, list(p.shape), p.dtype, p.bytes) for p in w.params]
    return Trace(source="simulated", meta=meta, params=params, ranks=ranks)
