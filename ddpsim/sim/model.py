"""The simpy model of DDP: one process per actor, named after what it plays.

Actors
  ``rank``       one rank's training loop: forward, [graph search], backward,
                 finalize, optimizer. An actor may stand for a *group* of ranks (api.py).
  ``backward``   autograd producing gradients one by one, and the reducer's hooks:
                 each gradient goes into its bucket (``mark_variable_ready``), the last
                 one makes the bucket ready (``mark_bucket_ready``), and ready buckets
                 launch strictly in bucket-index order (``all_reduce_bucket``), as in
                 torch's reducer.cpp (``Reducer`` below).
  ``allreduce``  one collective: starts once *every* actor has launched it (the
                 slowest rank delays everyone), then moves its data on the platform.
  ``finalize``   ``finalize_backward``: wait for every collective of the iteration,
                 then copy the buckets back into ``.grad``.
  ``optimizer``  the step after a synced backward.

How long each piece takes is the platform's business (``platform.py``: a device per
rank, or CPU cores shared with gloo's threads). Times are seconds (floats); the
trace builder (api.py) turns them into integer ns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from ddpsim.sim import hooked, join
from ddpsim.sim.actor import Actor
from ddpsim.sim.network import Link
from ddpsim.sim.platform import Devices, platform_for
from ddpsim.sim.workload import Workload


@dataclass
class Plan:
    """What one micro-step does (shared by all actors)."""

    iteration: int
    sync: bool
    layout_id: int  # index into Model.layouts
    search: bool = False  # find_unused_parameters graph search at the end of forward
    bitmap: bool = False  # allreduce the int32 used-parameter bitmap
    mark_unused: bool = False  # unused params marked ready at the first hook
    naive: bool = False  # per-parameter allreduce after the whole backward
    buffers: bool = False  # broadcast the buffers before the forward (_sync_buffers)
    delay: bool = False  # static_graph's first synced step: every bucket launched after the backward
    skip: frozenset = frozenset()  # buckets left without an allreduce (skip_all_reduce_unused_params)


@dataclass
class Work:
    """One collective in flight: what c10d's ``allreduce`` returns (``c10d::Work``)."""

    key: tuple  # (iteration, bucket index, "bitmap" or "buffers")
    nbytes: int
    pending: int  # actors that have not launched it yet
    done: simpy.Event
    start: float = 0.0
    end: float = 0.0
    kind: str = "allreduce"  # or "broadcast" (the buffers)
    seconds: float | None = None  # its cost where known (a learnt broadcast); None: the link's
    issued: list = field(default_factory=list)  # a hooked bucket's: when this rank issued each stage (hooked.py)


class Model:
    """Shared state of one simulation: the layouts, the collectives, the platform."""

    def __init__(self, env: simpy.Environment, w: Workload, link: Link, world_size: int,
                 layouts: list[list[list[int]]], plans: list[Plan], actors: list[Actor],
                 platform: Devices | None = None):
        self.env, self.w, self.link, self.world_size = env, w, link, world_size
        self.layouts, self.plans, self.actors = layouts, plans, actors
        self.platform = platform or platform_for(env, link, world_size, actors)
        self.collectives, self.n_collectives = {}, 0  # key -> Work (launched by some actor); started ones
        sizes = [p.bytes for p in w.params]
        self.bucket_bytes = [[sum(sizes[i] for i in b) for b in lay] for lay in layouts]
        owners = [{i: bi for bi, b in enumerate(lay) for i in b} for lay in layouts]  # parameter -> its bucket
        self.bucket_of = [[owner.get(i, 0) for i in range(len(sizes))] for owner in owners]  # per layout
        self.bitmap_bytes = 4 * len(sizes)
        self.broadcast_s = w.broadcast_cost(link, world_size)
        self.join, self.final_sync_buffers = False, True  # SimConfig.join, .broadcast_buffers (api.py)
        self.hook, self.hook_rates, self.synced_step = None, {}, hooked.synced_steps(plans)  # api.py

    def run_comm_hook(self, actor: Actor, plan: Plan, b: int, nbytes: int, at: float | None = None) -> Work:
        """``Reducer::run_comm_hook``: bucket ``b``'s allreduce, or the registered hook's collectives
        (none for noop), launched at ``at`` (default: now); a joined rank runs it too, on zeros (sim/join.py)."""
        return (self.launch(actor, (plan.iteration, b), nbytes) if self.hook is None
                else hooked.launch_bucket(self, actor, plan, b, nbytes, Work, at))

    def launch(self, actor: Actor, key: tuple, nbytes: int, kind: str = "allreduce",
               seconds: float | None = None) -> Work:
        """``actor`` launches collective ``key``; the last launcher starts it. ``seconds``: its cost,
        where known (None: the platform's link prices it)."""
        c = self.collectives.get(key)
        if c is None:
            c = self.collectives[key] = Work(key, nbytes, len(self.actors), self.env.event(), kind=kind,
                                             seconds=seconds)
        c.pending -= 1
        self.platform.launched(actor, c)
        if c.pending == 0:
            self.n_collectives += 1
            self.env.process(allreduce(self.env, self, c))
        return c


class Reducer:
    """One actor's buckets in one synced micro-step: torch's ``Reducer`` reduced to timing.

    Note [Buckets launch in index order]: reducer.cpp's ``mark_bucket_ready`` launches
    buckets from ``next_bucket_`` on while they are ready, so a ready bucket waits for
    every lower-indexed one (``launchable``). Unused parameters are marked ready at
    the first hook; a bucket they complete alone is ready then, and launches with
    the next bucket that a gradient makes ready (torch launches it at once; kept, as
    it was, so as not to move predictions: an open question).
    """

    def __init__(self, model: Model, actor: Actor, plan: Plan, brec: dict | None):
        self.model, self.actor, self.plan, self.brec = model, actor, plan, brec
        self.bucket_of = model.bucket_of[plan.layout_id]
        self.nbytes = model.bucket_bytes[plan.layout_id]
        self.pending = [len(b) for b in model.layouts[plan.layout_id]]
        self.next_bucket = 0
        self.works: list[Work] = []

    def mark_variable_ready(self, p: int, now: float) -> bool:
        """``Reducer::mark_variable_ready``: ``p``'s gradient is in its bucket. True if that made it ready."""
        b = self.bucket_of[p]
        self.pending[b] -= 1
        if self.pending[b]:
            return False
        self.mark_bucket_ready(b, now)
        return True

    def mark_bucket_ready(self, b: int, now: float) -> None:
        if self.brec is not None:
            self.brec[b] = [now, None, None]  # ready, launch, launch end

    def launchable(self):
        """The buckets to launch now, in index order (Note [Buckets launch in index order])."""
        while not self.plan.naive and self.next_bucket < len(self.pending) and self.pending[self.next_bucket] == 0:
            if self.next_bucket not in self.plan.skip:  # Reducer::should_skip_all_reduce_bucket
                yield self.next_bucket
            self.next_bucket += 1

    def all_reduce_bucket(self, b: int, now: float) -> Work:
        """``Reducer::all_reduce_bucket``: launch bucket ``b``'s allreduce.

    Note [Launching costs the autograd thread]: DDP launches a bucket's allreduce
    from the autograd hook of the gradient that completed it, and the next
    gradient waits until the launch returns: torch's comm hook divides the bucket
    by the world size and enqueues the collective, ~0.3-1.5 ms for a 2-4 MiB
    bucket here (``launch_end_ns - launch_ns`` in a recording). A layout with more
    buckets launches more often, so this is charged per launch
    (``Workload.launch_cost``), not hidden in the next gradient's compute time.
        """
        if self.brec is not None:
            self.brec.setdefault(b, [now, None, None])[1] = now
        self.works.append(self.model.run_comm_hook(self.actor, self.plan, b, self.nbytes[b], now))
        return self.works[-1]

    def launch_returned(self, b: int, now: float) -> None:
        if self.brec is not None:
            self.brec[b][2] = now  # launch_end_ns

    def check_all_launched(self) -> None:
        if self.next_bucket < len(self.pending):
            raise RuntimeError("a bucket never became ready (parameters without gradients)")


def allreduce(env, model: Model, work: Work):
    """One collective: its transfer on the platform, then its Work completes."""
    yield from model.platform.transfer(work)
    work.end = env.now
    work.done.succeed()


def rank(env, model: Model, actor: Actor):
    """One rank's (or rank group's) training loop over every planned micro-step; the forward span
    starts with the buffer broadcast, as torch's ``_pre_forward`` does."""
    w, compute = model.w, model.platform.compute
    for plan in model.plans:
        if actor.data_steps is not None and plan.iteration >= actor.data_steps:  # out of data, joined
            yield from join.shadow(env, model, actor, plan)
            continue
        f, fb = actor.multipliers(plan.iteration, plan.sync, w.micro_step_scale(plan.sync))
        rec = {"plan": plan, "grads": [], "buckets": {}} if actor.record else None
        t_start = env.now
        if plan.buffers:  # _sync_buffers: every rank waits for rank 0's buffers (Note [Buffers follow rank 0])
            cast = model.launch(actor, (plan.iteration, "buffers"), w.buffer_bytes, "broadcast", model.broadcast_s)
            yield cast.done
            if rec is not None:
                rec["buffers"] = (t_start, cast.end, cast.nbytes)
        yield compute(actor, w.forward_s * f)
        t_fwd = env.now
        if plan.search:
            yield compute(actor, w.graph_search_s)
        t_search = env.now
        if w.pre_backward_s:
            yield compute(actor, w.pre_backward_s)
        t_bwd = env.now
        works = yield from backward(env, model, actor, plan, fb, rec)
        if plan.sync:
            yield from finalize(env, model, actor, works)
        t_bwd_end = env.now
        t_opt = None
        if plan.sync:
            t_opt = yield from optimizer(env, model, actor)
        if rec is not None:
            rec.update(start=t_start, fwd_end=t_fwd, search=(t_fwd, t_search) if plan.search else None,
                       bwd=(t_bwd, t_bwd_end), opt=t_opt, colls=works)
            actor.iterations.append(rec)
        gap = actor.gap_after(plan.iteration, w.iter_gap_s)
        if gap:  # data loading, logging...: work DDP does not do
            yield model.platform.elsewhere(actor, gap)
    if model.join:
        yield from join.final_sync(env, model, actor)


def backward(env, model: Model, actor: Actor, plan: Plan, f: float, rec):
    """Autograd: gradients in ready order, each handed to the reducer as its hook would.

    Note [Gradient times as prefix sums]: when compute does not depend on
    communication (a platform that is not ``coupled``, no launch costs), gradient
    times are prefix sums, so the process wakes only where buckets launch: the same
    timeline with far fewer events.
    """
    w, platform = model.w, model.platform
    grads = rec["grads"] if rec is not None else None
    reducer = Reducer(model, actor, plan, rec["buckets"] if rec is not None else None) if plan.sync else None
    lazy = not (platform.coupled or w.launch_s or w.launch_s_per_byte or model.hook_rates)
    t0, done, waited = env.now, 0.0, 0.0  # lazy: compute done / waited for since t0
    unused = list(w.unused) if plan.mark_unused else []
    for p, c in zip(w.ready_order, w.grad_compute_s):
        if lazy:
            done += c * f
            now = t0 + done
        else:
            yield platform.gradient(actor, c * f)
            now = env.now
        if grads is not None:
            grads.append((now, p, False))
        if reducer is None:
            continue
        for u in unused:  # marked ready at the first autograd hook
            if grads is not None:
                grads.append((now, u, True))
            reducer.mark_variable_ready(u, now)  # launches wait for the next ready bucket
        unused = []
        if not reducer.mark_variable_ready(p, now) or plan.delay:
            continue
        for b in reducer.launchable():
            if done > waited:
                yield env.timeout(done - waited)
                waited = done
            reducer.all_reduce_bucket(b, now if lazy else env.now)  # env.now: after earlier launches' costs
            cost = hooked.launch_cost(model, plan, b, reducer.nbytes[b])  # Note [Launching costs ...]
            if cost > 0:
                yield platform.compute(actor, cost)
                reducer.launch_returned(b, env.now)
    if done > waited or (lazy and reducer is None):
        yield env.timeout(done - waited)
    if reducer is None:
        return []
    if plan.delay:  # Reducer::delay_all_reduce: static_graph learns the graph in its first iteration
        for b in reducer.launchable():
            reducer.all_reduce_bucket(b, env.now)
    if plan.naive:
        yield from naive_reduce(env, reducer)
    else:
        reducer.check_all_launched()
    if plan.bitmap:
        reducer.works.append(model.launch(actor, (plan.iteration, "bitmap"), model.bitmap_bytes))
        if rec is not None:
            rec["bitmap_launch"] = env.now
    return reducer.works


def naive_reduce(env, reducer: Reducer):
    """``NaiveDDP.all_reduce_grads``: each allreduce waits for the previous one to finish."""
    for b in range(len(reducer.nbytes)):
        work = reducer.all_reduce_bucket(b, env.now)
        if not work.done.processed:
            yield work.done


def finalize(env, model: Model, actor: Actor, works):
    """finalize_backward: wait for every collective, then copy buckets into .grad."""
    pending = [c.done for c in works if not c.done.processed]
    if pending:
        yield simpy.AllOf(env, pending)
    if model.w.finalize_s:
        yield model.platform.compute(actor, model.w.finalize_s)


def optimizer(env, model: Model, actor: Actor):
    if model.w.step_gap_s:
        yield env.timeout(model.w.step_gap_s)
    t0 = env.now
    yield model.platform.compute(actor, model.w.optimizer_s)
    return t0, env.now  # the step's span (longer than optimizer_s where the platform shares the device)
