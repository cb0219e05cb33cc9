"""Planning a simulation: the link, the bucket layouts of every micro-step, the actors.

Rank groups (how thousands of ranks stay fast)
----------------------------------------------
A collective starts when its *last* rank launches it, so what matters for timing
is the slowest rank. Ranks that behave identically are one actor:

- no jitter: every non-straggler rank is identical, so one actor stands for all
  of them (exact); each straggler is its own actor.
- jitter, expected mode: every non-straggler rank is one actor at the expected
  slowest multiplier (Note [Waiting for the slowest rank] in stragglers.py).
- jitter (a per-rank, per-micro-step compute multiplier ``1 + jitter·z``,
  z ~ N(0,1), seeded): up to ``SimConfig.sampled_ranks()`` + 1 ranks are simulated one by
  one (``max_explicit_ranks`` where ranks share CPU cores: each plays its turns,
  Note [Ranks that share a CPU]). Beyond that, the first rank and a seeded sample
  of that many ranks are explicit, and the remaining n ranks are one
  *group* actor whose multiplier is the maximum of n draws, sampled directly as
  ``1 + jitter·Phi^-1(U^(1/n))``. Because every launch time grows with the
  multiplier, the group actor launches each bucket when the slowest member
  would: exact for synced steps, in distribution, so 64 ranks cost 9 actors, not
  64. Across a no_sync window of k micro-steps (no collective re-aligns the
  ranks) what counts is each rank's sum over the window, ``k + jitter·sqrt(k)·z``:
  the group draws its maximum once per window and spreads it over the window's
  micro-steps (``1 + jitter·z_max/sqrt(k)`` each).

The output trace holds only the included ranks (meta.ranks_included); the group
actor is not a real rank and is described in meta.rank_groups.
"""
from __future__ import annotations

import random
import statistics
from dataclasses import replace

from ddpsim.sim import netmodel, network, stragglers
from ddpsim.sim.config import SimConfig
from ddpsim.sim.model import Actor, Plan
from ddpsim.sim.replay import replayed
from ddpsim.sim.workload import Workload, construction_layout, ordered_layout, param_order
from ddpsim.trace import Bucket, Layout


GIVEN_NETWORK = "a flat ring at --bandwidth-gbps (latency --latency-us, else 0; the trace has no network)"


def resolve_link(w: Workload, cfg: SimConfig) -> network.Link:
    link = w.link
    cal = w.meta.get("calibration")  # a shared-core gloo workload's `ddpsim calibrate` lines
    if (link.shared_core and cfg.world_size != w.meta.get("recorded_world_size")
            and netmodel.covers(cal, cfg.world_size)):  # the target world size's network
        link = netmodel.link_at(cal, cfg.world_size, link.concurrency, link.interference)
    if cfg.hardware or w.meta.get("hardware"):  # a GPU model's own, or a recording's chosen one
        link = network.network_for(cfg.hardware or w.meta["hardware"], cfg.world_size)
    elif w.meta.get("no_network") and cfg.world_size > 1:  # learn.linkfit's Note [No network from one rank]
        if cfg.bandwidth_gbps is None:
            raise ValueError(str(w.meta["no_network"]).format(world_size=cfg.world_size))
        link = replace(link, name=GIVEN_NETWORK, one_rank=None, alpha_s=0.0)  # the user's flat ring, not "none"
    shared = cfg.shared_core
    if shared is None and cfg.interference is not None:
        shared = False  # an explicit interference picks that contention model (e.g. a GPU network)
    latency_us = cfg.latency_us
    if link.cluster is not None and cfg.bandwidth_gbps is not None:  # an explicit bandwidth: the flat ring formula
        given = f"flat ring, {cfg.bandwidth_gbps:g} Gbit/s a rank (given), in place of {link.name}"
        link = replace(link, cluster=None, algo="ring", name=given)
    elif cfg.bandwidth_gbps is not None and link.name != GIVEN_NETWORK:
        step = f", {latency_us:g} us a step" if latency_us is not None else ""
        link = replace(link, name=f"{cfg.bandwidth_gbps:g} Gbit/s a rank{step} (given), the rest as in {link.name}")
    elif link.cluster is not None and latency_us is not None:  # NCCL's model kept: the fabric's own latency a hop
        link, latency_us = replace(link, cluster=replace(link.cluster, net_latency_us=latency_us)), None
    return link.with_(alpha_s=None if latency_us is None else latency_us * 1e-6,
                      bandwidth_Bps=None if cfg.bandwidth_gbps is None else network.gbps_to_Bps(cfg.bandwidth_gbps),
                      algo=cfg.algo, concurrency=cfg.concurrency, interference=cfg.interference,
                      shared_core=shared)


def choose_layouts(w: Workload, cfg: SimConfig) -> tuple[list, list[str], list[int]]:
    """(layouts as (buckets, caps), their kinds, synced steps before the switch to the second).

    Follows torch 2.13 through ``ddpsim.buckets``; a replay of the
    recorded options takes the recording's layouts (Note [Replay the recorded layouts]).
    """
    caps = cfg.bucket_capacity()
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
            lay = construction_layout(w, caps, static_graph=False, find_unused=True)
        else:
            lay = ordered_layout(w, param_order(w, cfg.order, cfg.seed), caps)
        return [lay], ["construction"], []
    if fu and not static:  # never rebuilt
        return [construction_layout(w, caps, static, fu)], ["construction"], []
    # a single bucket (or bucket_cap_mb_list's), rebuilt in ready order
    return ([construction_layout(w, caps, static, fu), ordered_layout(w, ready, caps, cfg.last_bucket_small)],
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
        # Note [Buffers follow rank 0]: after a synced forward (require_forward_param_sync)
        buffers = cfg.broadcast_buffers and w.buffer_bytes > 0 and (i == 0 or plans[-1].sync)
        first = static and syncs == 0  # static_graph's first synced step (reducer.cpp)
        skip = skipped_buckets(layouts[layout_id], w.unused) if cfg.skip_all_reduce_unused_params and sync \
            and not first and not (cfg.naive or cfg.overlap) else frozenset()
        plans.append(Plan(i, sync, layout_id, search=sync and fu and not static,
                          bitmap=sync and ((fu and not static) or first), delay=sync and first,
                          mark_unused=bool(w.unused), naive=cfg.naive, buffers=buffers, skip=skip))
        syncs += sync
    return layouts, trace_layouts, plans


def skipped_buckets(layout: list[list[int]], unused: list[int]) -> frozenset:
    """The buckets of ``layout`` that ``skip_all_reduce_unused_params`` leaves without an allreduce: those
    whose parameters are all unused (reducer.cpp's ``should_skip_all_reduce_bucket``; Note [Skipping the
    allreduce of unused buckets] in ddpsim/minddp/unused_buckets.py). Not in static_graph's first step,
    whose ``delay_all_reduce`` reduces every bucket."""
    gone = set(unused)
    return frozenset(b for b, params in enumerate(layout) if gone.issuperset(params))


def _factors(rng: random.Random, n: int, jitter: float, base: float, group: int = 1, window: int = 1) -> list[float]:
    """``n`` micro-steps' compute multipliers: one rank's draws, or (``group`` > 1) the slowest of ``group``
    ranks', drawn once per no_sync ``window`` of micro-steps (module docstring)."""
    if jitter == 0:
        return [base] * n
    out: list[float] = []
    for i in range(n):
        if group == 1:
            z = rng.gauss(0.0, 1.0)
        elif i % window == 0:  # the max of `group` iid normals, by inverting U^(1/group), per window
            u = min(rng.random() ** (1.0 / group), 1 - 1e-16)
            z = statistics.NormalDist().inv_cdf(max(u, 1e-300)) / window ** 0.5
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
    synced = {int(r): float(f) for r, f in cfg.synced_backward_scale.items()}
    recorded = {int(r): rec for r, rec in cfg.recorded_ranks.items()}
    actors, groups = [], []
    alone = set(strag) | set(bscale) | set(synced) | set(recorded)  # ranks with their own speed play alone
    if cfg.uneven:  # each rank its own amount of data (sim/join.py)
        alone |= set(range(world))
    # expected: the others' group carries the spread; uneven inputs leave none (all alone): each rank draws its own
    drawn = 0.0 if cfg.jitter_mode == "expected" and not explicit and not cfg.uneven else cfg.jitter
    for r in sorted(alone):
        noise = 0.0 if r in recorded else drawn  # a recorded rank plays its recorded speeds instead
        actors.append(Actor(r, 1, _factors(random.Random(f"{cfg.seed}:{r}"), n_micro, noise, strag.get(r, 1.0)),
                            record=True, kind="straggler" if r in strag else "measured",
                            backward_scale=bscale.get(r, 1.0), synced_backward_scale=synced.get(r, 1.0),
                            recorded=recorded.get(r),
                            data_steps=n_micro - cfg.uneven * r if cfg.uneven else None))
    others = [r for r in range(world) if r not in alone] if world <= 100_000 else None
    n_others = world - len(alone)
    if n_others == 0:
        return actors, groups
    first = next(r for r in range(world) if r not in alone)
    if cfg.jitter > 0 and cfg.jitter_mode == "expected" and not explicit:  # Note [Waiting for the slowest rank]
        f = stragglers.slowest_factor(cfg.jitter, n_others, cfg.no_sync_every)
        actors.append(Actor(first, n_others, [f] * n_micro, record=True, kind="identical"))
        groups.append({"kind": "expected-slowest", "count": n_others, "represented_by": first, "factor": f})
        return actors, groups
    if cfg.jitter == 0 and not (explicit and n_others <= cfg.max_explicit_ranks):
        actors.append(Actor(first, n_others, [1.0] * n_micro, record=True, kind="identical"))
        groups.append({"kind": "identical", "count": n_others, "represented_by": first})
    elif cfg.one_by_one(n_others, explicit):
        for k, r in enumerate(others):
            actors.append(Actor(r, 1, _factors(random.Random(f"{cfg.seed}:{r}"), n_micro, cfg.jitter, 1.0),
                                record=k < cfg.trace_ranks))
    else:
        rng, n_sampled = random.Random(f"{cfg.seed}:sample"), cfg.sampled_ranks(explicit)
        if others is None:  # a huge world: draw from the rank numbers without listing them
            pool = [r for r in rng.sample(range(first + 1, world), min(world - first - 1, n_sampled + len(alone)))
                    if r not in alone]
            sample = [first] + sorted(pool[:min(n_sampled, n_others - 1)])
        else:
            sample = [first] + sorted(rng.sample(others[1:], min(n_sampled, len(others) - 1)))
        for k, r in enumerate(sample):  # the output trace keeps trace_ranks of them, as one by one
            actors.append(Actor(r, 1, _factors(random.Random(f"{cfg.seed}:{r}"), n_micro, cfg.jitter, 1.0),
                                record=k < cfg.trace_ranks, kind="sampled"))
        rest = n_others - len(sample)
        if rest:
            actors.append(Actor(-1, rest, _factors(random.Random(f"{cfg.seed}:group"), n_micro, cfg.jitter,
                                                   1.0, group=rest, window=cfg.no_sync_every),
                                record=False, kind="max-of-group"))
            groups.append({"kind": "max-of-group", "count": rest,
                           "note": "jitter multiplier = max of the group's draws; not in ranks"})
    return actors, groups
