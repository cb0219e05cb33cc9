"""``simulate(workload, config) -> (Trace, summary)``: one simulation, and the trace it gives.

The plan (layouts, actors, rank groups) is ``plan.py``, the processes ``model.py``,
their platform ``platform.py``, the configuration ``config.py``.
"""
from __future__ import annotations

import time
from dataclasses import asdict

import simpy

from ddpsim.analysis import summarize
from ddpsim.analysis.busy import lay_busy
from ddpsim.sim.budget import RUN_EVENTS_PER_ESTIMATED, SimulationTooLarge, count_actors, estimate_events, run_bounded
from ddpsim.sim.config import SimConfig
from ddpsim.sim.hooktrace import hook_fields
from ddpsim.sim.model import Model
from ddpsim.sim.model import rank as model_rank
from ddpsim.sim.plan import plan_actors, plan_layouts, resolve_link
from ddpsim.sim.replay import replayed
from ddpsim.sim.workload import Workload
from ddpsim.trace import (BucketEvent, Collective, GradReady, Iteration, JoinRecord, Layout, Param, RankTrace,
                          ShadowStep, Span, Trace)

__all__ = ["SimConfig", "SimulationTooLarge", "build_trace", "checked", "plan_actors", "plan_layouts",
           "require_workload", "resolve_link", "simulate"]


def simulate(w: Workload, config: SimConfig | None = None, platform=None, **overrides) -> tuple[Trace, dict]:
    """Simulate workload ``w`` under ``config``.

    ``platform``: a factory ``(env, link, world_size, actors) -> platform`` (see
    ``platform.py``); default the one the link describes (``platform_for``).

    Returns (trace with source "simulated", summary). The summary is
    ``ddpsim.analysis.summarize(trace)`` plus world_size, n_buckets, link, events.
    A recorded trace goes through ``ddpsim.learn.simulate``, which learns its workload first.
    """
    t0 = time.perf_counter()
    require_workload(w)
    cfg = config or SimConfig()
    if overrides:
        cfg = SimConfig(**{**asdict(cfg), **overrides})
    link, explicit, estimate = checked(w, cfg)
    layouts, trace_layouts, plans = plan_layouts(w, cfg)
    actors, groups = plan_actors(cfg, len(plans), explicit=explicit)
    env = simpy.Environment()
    model = Model(env, w, link, cfg.world_size, layouts, plans, actors,
                  platform and platform(env, link, cfg.world_size, actors))
    model.join, model.final_sync_buffers = cfg.join, cfg.broadcast_buffers
    model.hook, model.hook_rates, model.hook_plans = cfg.hook(), dict(cfg.hook_rates), {}
    if model.hook is not None and model.hook.groups > 1:  # round-robin: each group its own collectives
        model.platform.slots = simpy.Resource(env, capacity=link.concurrency * model.hook.groups)
    for a in model.actors:
        env.process(model_rank(env, model, a))
    run_bounded(env, max(RUN_EVENTS_PER_ESTIMATED * estimate, 10_000), cfg.time_limit_s)
    simpy_events = next(env._eid)  # simpy numbers every scheduled event
    # model events per actor: gradient-ready events, bucket ready/launch/complete, 4 spans
    model_events = len(actors) * sum(len(w.ready_order) + 4 + (3 * len(layouts[p.layout_id]) if p.sync else 0)
                                     for p in plans)
    trace = build_trace(w, cfg, link, model, trace_layouts, groups)
    trace.meta["layouts_from"] = "recording" if replayed(w, cfg) is not None else "computed"
    if w.busy:  # a GPU profile's idle time between kernels (Note [The recorded busy time, stretched])
        lay_busy(trace, w.busy)
    summary = summarize(trace)
    summary.update(world_size=cfg.world_size, n_buckets=len(trace_layouts[-1].buckets),
                   link=link.to_dict(), actors=len(actors), simpy_events=simpy_events,
                   model_events=model_events, estimated_events=estimate)
    if link.cluster is not None:
        summary["nccl"] = nccl_choices(link, trace_layouts[-1], cfg.world_size)
    trace.meta["summary"] = {k: v for k, v in summary.items() if k != "per_bucket"}  # deterministic: no wall time
    summary["sim_wall_s"] = time.perf_counter() - t0  # wall-clock time, planning to summary: never in the trace
    return trace, summary


def require_workload(w) -> None:
    """The simulator models DDP on a Workload; learning one from a trace is a layer above."""
    if not isinstance(w, Workload):
        raise TypeError(f"the simulator takes a ddpsim.sim.Workload, not {type(w).__name__}: "
                        "for a recorded trace use ddpsim.learn.simulate / ddpsim.learn.sweep")


def nccl_choices(link, layout: Layout, world_size: int) -> list[dict]:
    """What NCCL runs for each bucket of the steady layout (Note [NCCL's tuning model])."""
    out = []
    for b in layout.buckets:
        algo, proto = link.nccl_choice(b.bytes, world_size)
        out.append({"bucket": b.index, "bytes": b.bytes, "algo": algo, "proto": proto,
                    "allreduce_s": link.allreduce_s(b.bytes, world_size)})
    return out


def largest_nccl_choice(summary: dict) -> str:
    """"algo/proto" NCCL runs for the largest bucket of a simulation's ``summary`` (its ``nccl_choices``),
    or "" where none runs (one rank; a flat link, no NCCL model)."""
    big = max(summary.get("nccl") or [], key=lambda b: b["bytes"], default=None)
    return f"{big['algo']}/{big['proto']}" if big and big["algo"] != "none" else ""


def _ns(t: float) -> int:
    return round(t * 1e9)  # round() of a float is an int


def checked(w: Workload, cfg: SimConfig):
    """What ``simulate`` checks before it plans: ``cfg`` validated, then (its link, whether ranks share CPU
    cores, its estimated events); a ValueError or ``SimulationTooLarge`` in one line where it cannot run."""
    cfg.validate()
    link = resolve_link(w, cfg)
    explicit = bool(link.shared_core and link.cpus)
    return link, explicit, checked_estimate(w, cfg, link, explicit)


def checked_estimate(w: Workload, cfg: SimConfig, link, explicit: bool) -> int:
    """The simulation's estimated events (``budget.estimate_events``), or one line saying why it cannot run.

    ``explicit``: ranks share CPU cores (Note [Ranks that share a CPU]), so every rank must be its own
    actor; grouped, they would silently get a core each.
    """
    if explicit and count_actors(cfg, explicit) < cfg.world_size:  # grouped ranks would get a core each
        raise SimulationTooLarge(f"{cfg.world_size} ranks sharing {link.cpus} CPU cores: ranks that share cores are "
                                 f"simulated one by one, at most {cfg.max_explicit_ranks}; ask for fewer ranks, or "
                                 "name a network for ranks on devices of their own")
    estimate = estimate_events(w, cfg, explicit, link)
    if estimate > cfg.max_events:
        turns = ", and a turn per time slice of each rank sharing a core" if explicit and link.time_slice_s else ""
        raise SimulationTooLarge(
            f"this simulation needs about {estimate:,} events ({count_actors(cfg, explicit)} rank actor(s) x "
            f"{cfg.iters * cfg.no_sync_every:,} micro-steps x {len(w.ready_order)} gradients{turns}); the limit "
            f"is {cfg.max_events:,} (--max-events): simulate fewer --iters or raise the limit")
    return estimate


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
                                               None if end is None else _ns(end),
                                               **hook_fields(model, plan, c.key[1], launch, c)))
            opt = rec["opt"]
            iters.append(Iteration(
                plan.iteration, plan.sync, Span(_ns(rec["start"]), _ns(rec["fwd_end"])),
                Span(_ns(rec["bwd"][0]), _ns(rec["bwd"][1])),
                Span(_ns(opt[0]), _ns(opt[1])) if opt is not None else None,
                [GradReady(_ns(t), p, u) for t, p, u in rec["grads"]], buckets,
                Span(*map(_ns, rec["search"])) if rec["search"] else None, bitmap,
                Collective(_ns(rec["buffers"][0]), _ns(rec["buffers"][1]), rec["buffers"][2])
                if "buffers" in rec else None))
        numbers = group_ranks(a, model.actors, cfg.trace_ranks) if a.kind == "identical" else [a.rank]
        joined = join_record(a) if cfg.join else None
        for r in numbers:  # identical ranks share one timeline
            ranks.append(RankTrace(rank=r, host="simulated", layouts=layouts, iterations=iters, join=joined))
    ranks.sort(key=lambda r: r.rank)
    config = asdict(cfg)
    if cfg.bucket_cap_mb_list is None:  # written only where given: other simulations' meta stays as it was
        del config["bucket_cap_mb_list"]
    config["stragglers"] = {str(k): v for k, v in cfg.stragglers.items()}
    config["backward_scale"] = {str(k): v for k, v in cfg.backward_scale.items()}
    config["synced_backward_scale"] = {str(k): v for k, v in cfg.synced_backward_scale.items()}
    config["recorded_ranks"] = {str(k): v for k, v in cfg.recorded_ranks.items()}
    meta = {"world_size": cfg.world_size, "ranks_included": [r.rank for r in ranks],
            "rank_groups": groups, "simulator": "ddpsim.sim", "config": config,
            "link": link.to_dict(), "workload": {"name": w.name, **w.meta},
            "options": {"bucket_cap_mb": cfg.bucket_cap_mb, "find_unused_parameters": cfg.find_unused_parameters,
                        "static_graph": cfg.static_graph, "broadcast_buffers": cfg.broadcast_buffers,
                        "no_sync_every": cfg.no_sync_every, **({"join": True, "uneven": cfg.uneven} if cfg.join else {}),
                        **({"comm_hook": cfg.comm_hook} if cfg.comm_hook else {}),
                        **({"bucket_cap_mb_list": list(cfg.bucket_cap_mb_list)} if cfg.bucket_cap_mb_list else {}),
                        **({"skip_all_reduce_unused_params": True} if cfg.skip_all_reduce_unused_params else {}),
                        "iters": cfg.iters * cfg.no_sync_every}}
    params = [Param(p.index, p.name, list(p.shape), p.dtype, p.bytes) for p in w.params]
    return Trace(source="simulated", meta=meta, params=params, ranks=ranks)


def group_ranks(group, actors, most: int) -> list[int]:
    """The first ``most`` ranks of an identical ``group``: from its first rank up, those no other actor
    plays (a straggler among them plays alone)."""
    taken = {a.rank for a in actors if a is not group}
    out, r = [], group.rank
    while len(out) < min(group.count, most):
        if r not in taken:
            out.append(r)
        r += 1
    return out


def join_record(a) -> JoinRecord:
    """An actor's time under Join (sim/join.py) as the trace holds it."""
    if a.join_end is None:  # a collective that some rank never launched: the simulation stalled
        raise RuntimeError(f"the simulation stalled: rank {a.rank} never ended Join's final model sync")
    shadows = [ShadowStep(i, _ns(t0), _ns(t1), [Collective(_ns(t), _ns(w.end), w.nbytes) for t, w in works])
               for i, t0, t1, works in a.shadows]
    return JoinRecord(_ns(a.join_start), _ns(a.join_end), True, shadows)
