"""The simpy model of DDP: one process per actor, named after what it plays.

Actors
  ``rank``       one rank's training loop: forward, [graph search], backward, finalize,
                 optimizer. An actor may stand for a *group* of ranks (see api.py).
  ``backward``   autograd producing gradients one by one; each gradient fills its
                 bucket (``mark_variable_ready``); a full bucket is ready
                 (``mark_bucket_ready``) and ready buckets launch strictly in
                 bucket-index order (``all_reduce_bucket``).
  ``allreduce``  one collective: starts once *every* actor has launched it (the
                 slowest rank delays everyone), then holds one of the link's
                 ``concurrency`` slots (a simpy Resource: gloo = 2 threads) for
                 ``link.allreduce_s(bytes, world_size)``.
  ``finalize``   ``finalize_backward``: wait for every collective of the iteration,
                 then copy the buckets back into ``.grad``.
  ``optimizer``  the step after a synced backward.

While any collective transfers, compute started on a rank is slowed by
``1 + link.interference`` (applied per gradient, decided at the gradient's start;
a transfer ending exactly then does not count, one starting then does).
With ``link.shared_core`` (CPU gloo, each rank pinned to one core) each actor
has a ``Core``: a processor-sharing server. Its compute (forward, gradients,
finalize, optimizer) and every in-flight collective are jobs on it (``share``
gives their rates: Note [Latency-bound jobs on a shared core]); a collective
completes when its job has finished on every actor's core. With ``link.cpus``
(more ranks than cores) rank r's actor uses core ``r % cpus``, shared with the
ranks congruent to it; with ``link.time_slice_s`` they take turns on it (Note
[Ranks take turns on a shared core]), and a rank keeps its turn into the gap
before its next iteration.
Times are seconds (floats); the trace builder turns them into integer ns.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

import simpy

from ddpsim.sim.core import Core
from ddpsim.sim.network import Link
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


@dataclass
class Collective:
    key: tuple
    nbytes: int
    pending: int  # actors that have not launched it yet
    done: simpy.Event
    start: float = 0.0
    end: float = 0.0
    counted: bool = False  # already counted in flight when launched (a slot was free)


@dataclass
class Actor:
    rank: int  # the rank it is labelled as
    count: int  # how many ranks it stands for
    factors: list[float]  # compute multiplier per micro-step (straggler x jitter)
    record: bool = False
    kind: str = "rank"
    iterations: list = field(default_factory=list)  # raw records when ``record``
    core: Core | None = None  # its CPU core, with link.shared_core
    backward_scale: float = 1.0  # its own backward speed (measured; extract.rank_factors)


class Model:
    """Shared state of one simulation: the collectives and the link's slots."""

    def __init__(self, env: simpy.Environment, w: Workload, link: Link, world_size: int,
                 layouts: list[list[list[int]]], plans: list[Plan], actors: list[Actor]):
        self.env, self.w, self.link, self.world_size = env, w, link, world_size
        self.layouts, self.plans, self.actors = layouts, plans, actors
        self.slots = simpy.Resource(env, capacity=link.concurrency)
        self.ends: dict[tuple, float] = {}  # transferring collectives -> end time (interference)
        self.committed = 0  # collectives started by all ranks, running or queued for a slot
        self.collectives: dict[tuple, Collective] = {}
        self.n_collectives = 0
        sizes = [p.bytes for p in w.params]
        self.bucket_bytes = [[sum(sizes[i] for i in b) for b in lay] for lay in layouts]
        self.bucket_of = []
        for lay in layouts:
            m = [0] * len(sizes)
            for bi, b in enumerate(lay):
                for i in b:
                    m[i] = bi
            self.bucket_of.append(m)
        self.bitmap_bytes = 4 * len(sizes)
        self._schedules: dict = {}
        # A collective is one job per core carrying the CPU work of the ranks pinned there
        # (``Core.ranks``): `calibrate` timed it with ranks sharing cores as here (Note [Ranks that share a CPU])
        self.cores: list[Core] = []
        if link.shared_core:  # rank r on core r % cpus when ranks share cores, else a core each
            shared = bool(link.cpus) and all(a.count == 1 for a in actors)
            pool = [Core(env, link.time_slice_s) for _ in range(link.cpus)] if shared else []
            for a in actors:
                a.core = pool[a.rank % link.cpus] if shared else Core(env)
                a.core.ranks += 1
                if a.core.ranks == 1:
                    self.cores.append(a.core)

    def run(self) -> None:
        for a in self.actors:
            self.env.process(rank(self.env, self, a))
        self.env.run()

    def schedule(self, plan: Plan) -> tuple[list[tuple[int, list[int]]], list[int]]:
        """(grad position -> buckets launched there, grad position each bucket is ready at).

        Static for a layout: the ready order is fixed, and buckets launch in index
        order once ready. Unused params count as ready at the first gradient.
        """
        key = (plan.layout_id, plan.mark_unused, plan.naive)
        if key not in self._schedules:
            bucket_of = self.bucket_of[plan.layout_id]
            pending = [len(b) for b in self.layouts[plan.layout_id]]
            nb, ready_pos, out, nxt = len(pending), [0] * len(pending), [], 0
            if plan.mark_unused:
                for u in self.w.unused:
                    pending[bucket_of[u]] -= 1
            for pos, p in enumerate(self.w.ready_order):
                b = bucket_of[p]
                pending[b] -= 1
                if pending[b] == 0:
                    ready_pos[b] = pos
                    launched = []
                    while not plan.naive and nxt < nb and pending[nxt] == 0:
                        launched.append(nxt)
                        nxt += 1
                    if launched:
                        out.append((pos, launched))
            if plan.naive:
                out = [(len(self.w.ready_order) - 1, list(range(nb)))]
            elif nxt < nb:
                raise RuntimeError("a bucket never became ready (parameters without gradients)")
            self._schedules[key] = (out, ready_pos)
        return self._schedules[key]

    def launch(self, key: tuple, nbytes: int) -> Collective:
        """An actor launches collective ``key``; the last launcher starts it."""
        c = self.collectives.get(key)
        if c is None:
            c = self.collectives[key] = Collective(key, nbytes, len(self.actors), self.env.event())
        c.pending -= 1
        if c.pending == 0:
            self.n_collectives += 1
            if self.committed < self.link.concurrency:  # a slot is free: in flight from now,
                c.counted = True  # so compute started at this instant is already slowed
                self.ends[key] = self.env.now + self.link.allreduce_s(nbytes, self.world_size)
            self.committed += 1
            self.env.process(allreduce(self.env, self, c))
        return c


def allreduce(env, model: Model, coll: Collective):
    """One collective on the link: wait for a slot, transfer, signal completion."""
    with model.slots.request() as slot:
        yield slot
        coll.start = env.now
        duration = model.link.allreduce_s(coll.nbytes, model.world_size)
        if not coll.counted:
            model.ends[coll.key] = env.now + duration
        if model.link.shared_core:  # a job on every core, using only its CPU work's share of it
            # (Note [Latency-bound jobs on a shared core])
            yield simpy.AllOf(env, [c.run(duration, model.link.core_demand(coll.nbytes, model.world_size, c.ranks))
                                    for c in model.cores])
        else:
            yield env.timeout(duration)
        del model.ends[coll.key]
        model.committed -= 1
    coll.end = env.now
    coll.done.succeed()


def rank(env, model: Model, actor: Actor):
    """One rank's (or rank group's) training loop over every planned micro-step."""
    w = model.w
    for plan in model.plans:
        f = actor.factors[plan.iteration]
        rec = {"plan": plan, "grads": [], "buckets": {}} if actor.record else None
        t_start = env.now
        yield compute(env, actor, w.forward_s * f)
        t_fwd = env.now
        if plan.search:
            yield compute(env, actor, w.graph_search_s)
        t_search = env.now
        if w.pre_backward_s:
            yield compute(env, actor, w.pre_backward_s)
        t_bwd = env.now
        colls = yield from backward(env, model, actor, plan, f * actor.backward_scale, rec)
        if plan.sync:
            yield from finalize(env, model, actor, colls)
        t_bwd_end = env.now
        t_opt = None
        if plan.sync:
            t_opt = yield from optimizer(env, actor, w)
        if rec is not None:
            rec.update(start=t_start, fwd_end=t_fwd, search=(t_fwd, t_search) if plan.search else None,
                       bwd=(t_bwd, t_bwd_end), opt=t_opt, colls=colls)
            actor.iterations.append(rec)
        if w.iter_gap_s:
            if actor.core is not None:
                actor.core.keep(actor.rank)
            yield env.timeout(w.iter_gap_s)


def backward(env, model: Model, actor: Actor, plan: Plan, f: float, rec):
    """Autograd: gradients in ready order; buckets fill, become ready, launch in order.

    Without interference, a shared core or launch costs, compute does not depend
    on communication, so the gradient times are prefix sums and the process only
    wakes where buckets launch (the same timeline, far fewer events). Otherwise
    each gradient is its own step.

    Note [Launching costs the autograd thread]: DDP launches a bucket's allreduce
    from the autograd hook of the gradient that completed it, and the next
    gradient waits until the launch returns: torch's comm hook divides the bucket
    by the world size and enqueues the collective, ~0.3-1.5 ms for a 2-4 MiB
    bucket here (``launch_end_ns - launch_ns`` in a recording). A layout with more
    buckets launches more often, so this is charged per launch
    (``Workload.launch_cost``), not hidden in the next gradient's compute time.
    """
    w = model.w
    if model.link.interference or model.link.shared_core or w.launch_s or w.launch_s_per_byte:
        colls = yield from _backward_stepwise(env, model, actor, plan, f, rec)
        return colls
    t0 = env.now
    cum = list(accumulate(c * f for c in w.grad_compute_s))
    if rec is not None:
        rec["grads"] = [(t0 + t, p, False) for t, p in zip(cum, w.ready_order)]
    if not plan.sync:
        yield env.timeout(cum[-1])
        return []
    schedule, ready_pos = model.schedule(plan)
    brec = rec["buckets"] if rec is not None else None
    nbytes = model.bucket_bytes[plan.layout_id]
    if rec is not None:
        if plan.mark_unused:
            rec["grads"] += [(t0 + cum[0], u, True) for u in w.unused]
        for b, pos in enumerate(ready_pos):
            brec[b] = [t0 + cum[pos], None, None]
    if plan.naive:  # NaiveDDP: after backward, one blocking allreduce per parameter
        yield env.timeout(cum[-1])
        colls = yield from naive_reduce(env, model, plan, nbytes, brec)
        return colls
    colls, last = [], 0.0
    for pos, launches in schedule:
        target = cum[pos]
        if target > last:
            yield env.timeout(target - last)
            last = target
        for bi in launches:
            colls.append(_launch(model, plan, bi, nbytes, brec, t0 + target))
    if cum[-1] > last:
        yield env.timeout(cum[-1] - last)
    if plan.bitmap:
        colls.append(model.launch((plan.iteration, "bitmap"), model.bitmap_bytes))
        if rec is not None:
            rec["bitmap_launch"] = env.now
    return colls


def _backward_stepwise(env, model: Model, actor: Actor, plan: Plan, f: float, rec):
    w = model.w
    core = actor.core
    sync = plan.sync
    slow = 1.0 + model.link.interference
    grads = rec["grads"] if rec is not None else None
    brec = rec["buckets"] if rec is not None else None
    if sync:
        layout = model.layouts[plan.layout_id]
        bucket_of = model.bucket_of[plan.layout_id]
        nbytes = model.bucket_bytes[plan.layout_id]
        pending = [len(b) for b in layout]
        nb = len(layout)
    colls, next_launch, first = [], 0, True
    timeout = env.timeout
    for p, c in zip(w.ready_order, w.grad_compute_s):
        if core is not None:  # shares the core with this rank's in-flight collectives
            yield compute(env, actor, c * f)
        else:
            now = env.now  # slowed if a transfer is running past this instant
            busy = any(e > now for e in model.ends.values())
            yield timeout(c * f * slow if busy else c * f)
        if grads is not None:
            grads.append((env.now, p, False))
        if not sync:
            continue
        now = env.now
        if first and plan.mark_unused:
            first = False
            for u in w.unused:  # marked ready at the first autograd hook
                if grads is not None:
                    grads.append((now, u, True))
                pending[bucket_of[u]] -= 1
        b = bucket_of[p]
        pending[b] -= 1
        if pending[b] == 0:
            if brec is not None:
                brec[b] = [now, None, None]  # ready, launch, launch end
            if not plan.naive:
                while next_launch < nb and pending[next_launch] == 0:
                    colls.append(_launch(model, plan, next_launch, nbytes, brec, env.now))
                    # Note [Launching costs the autograd thread]
                    cost = w.launch_cost(nbytes[next_launch])
                    if cost > 0:
                        yield compute(env, actor, cost)
                        if brec is not None:
                            brec[next_launch][2] = env.now  # launch_end_ns
                    next_launch += 1
    if sync:
        if plan.naive:  # NaiveDDP: after backward, one blocking allreduce per parameter
            colls = yield from naive_reduce(env, model, plan, nbytes, brec)
        elif next_launch < nb:
            raise RuntimeError("a bucket never became ready (parameters without gradients)")
        if plan.bitmap:
            colls.append(model.launch((plan.iteration, "bitmap"), model.bitmap_bytes))
            if rec is not None:
                rec["bitmap_launch"] = env.now
    return colls


def naive_reduce(env, model, plan, nbytes, brec):
    """``NaiveDDP.all_reduce_grads``: each allreduce waits for the previous one to finish."""
    colls = []
    for bi in range(len(nbytes)):
        colls.append(_launch(model, plan, bi, nbytes, brec, env.now))
        if not colls[-1].done.processed:
            yield colls[-1].done
    return colls


def _launch(model, plan, bi, nbytes, brec, now):
    if brec is not None:
        brec.setdefault(bi, [now, None, None])[1] = now
    return model.launch((plan.iteration, bi), nbytes[bi])


def compute(env, actor: Actor, seconds: float) -> simpy.Event:
    """``seconds`` of CPU work: on the actor's core when it has one (shared core), else a timeout."""
    return actor.core.run(seconds, owner=actor.rank) if actor.core is not None else env.timeout(seconds)


def finalize(env, model: Model, actor: Actor, colls):
    """finalize_backward: wait for every collective, then copy buckets into .grad."""
    pending = [c.done for c in colls if not c.done.processed]
    if pending:
        yield simpy.AllOf(env, pending)
    if model.w.finalize_s:
        yield compute(env, actor, model.w.finalize_s)


def optimizer(env, actor: Actor, w: Workload):
    if w.step_gap_s:
        yield env.timeout(w.step_gap_s)
    t0 = env.now
    yield compute(env, actor, w.optimizer_s)
    return t0, env.now  # the step's span (longer than optimizer_s on a shared core)
