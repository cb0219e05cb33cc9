"""A communication hook in the simpy model (what it sends: ``sim/comm_hooks.py``).

With a hook registered, ``Reducer::run_comm_hook`` hands the bucket to the hook instead of DDP's
own allreduce, and the bucket is done when the hook's future is. Here that future is a ``Work``
that no rank launches: a process issues the hook's collectives stage by stage (each one still
starts only when every rank has launched it) and completes the bucket after the last stage.
The hook's own compute (``comm_hooks.compute_s``, at ``SimConfig.hook_rates``): what it does in
the hook call holds the rank's autograd thread (``launch_s``, like DDP's own launch), what it does
in its future's callbacks delays the bucket's completion.
"""
from __future__ import annotations

import simpy

from ddpsim.sim import comm_hooks

ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}  # bytes per gradient element


def bucket(model, plan, b: int) -> tuple[list[tuple[int, ...]], int, int]:
    """(gradient shapes, bytes per element, synced step) of bucket ``b`` in ``plan``."""
    params = [model.w.params[i] for i in model.layouts[plan.layout_id][b]]
    shapes = [tuple(p.shape) if p.shape else (max(1, p.bytes // ELEMENT_BYTES.get(p.dtype, 4)),) for p in params]
    element = ELEMENT_BYTES.get(params[0].dtype, 4) if params else 4
    return shapes, element, model.synced_step[plan.iteration]


def hook_plan(model, plan, b: int) -> tuple[list[list[int]], tuple]:
    """(the stages' bytes, ``compute_s``) of bucket ``b`` in ``plan``, worked out once per layout,
    bucket and synced step (every rank and both calls below ask for the same)."""
    key = (plan.layout_id, b, model.synced_step[plan.iteration])
    if key not in model.hook_plans:  # the bucket's shapes only on a miss: this is asked per launch and rank
        shapes, element, step = bucket(model, plan, b)
        model.hook_plans[key] = (comm_hooks.stages(model.hook, shapes, element, step),
                                 comm_hooks.compute_s(model.hook, shapes, element, step, model.hook_rates))
    return model.hook_plans[key]


def launch_s(model, plan, b: int) -> float:
    """Seconds the hook call itself computes before its first collective (0 without a hook or rates)."""
    if model.hook is None or not model.hook_rates:
        return 0.0
    return hook_plan(model, plan, b)[1][0]


def launch_cost(model, plan, b: int, nbytes: int) -> float:
    """Seconds bucket ``b``'s launch holds the autograd thread (Note [Launching costs the autograd
    thread] in model.py). DDP's own allreduce (and allreduce_hook, round-robin) divides the fp32
    bucket by the world size and enqueues it: the learnt ``launch_cost``. A hook that divides its
    own compressed tensor (fp16, bf16, PowerSGD once it compresses) or sends nothing (noop) keeps
    the per-launch part and adds its own compute instead of the division."""
    w = model.w
    if not compresses(model, plan, b):
        return w.launch_cost(nbytes)
    return w.launch_s + launch_s(model, plan, b)


def compresses(model, plan, b: int) -> bool:
    """Whether bucket ``b``'s hook does something else than DDP's own fp32 allreduce: not without a
    hook, nor allreduce or round-robin, nor PowerSGD before ``start_powerSGD_iter`` (its vanilla
    steps run ``_allreduce_fut``: the division and one allreduce)."""
    hook = model.hook
    if hook is None or hook.name in ("allreduce", "round-robin"):
        return False
    return hook.name != "powersgd" or len(hook_plan(model, plan, b)[0]) == 3


def launch_bucket(model, actor, plan, b: int, nbytes: int, work_class, at: float | None = None):
    """Bucket ``b``'s collectives under ``model.hook``, launched at ``at`` (default: now); returns the Work
    the bucket waits on. A hook that sends nothing and computes nothing (noop) is done as it is launched,
    to the nanosecond: its bucket is in flight for no time, so no overlap is counted for it."""
    stages, (first, between, after) = hook_plan(model, plan, b)
    work = work_class((plan.iteration, b), nbytes, 0, model.env.event())
    if not stages and not after:  # as _stages would: nothing sent, nothing computed after
        work.start = work.end = model.env.now if at is None else at
        work.done.succeed()
        return work
    small = model.hook.name == "powersgd" and compresses(model, plan, b)  # P and Q: far below any bucket
    floor = model.hook_rates.get("allreduce_latency_s", 0.0) if small else 0.0
    model.env.process(_stages(model, actor, work, stages, first, [*between, after], floor))
    return work


def _stages(model, actor, work, stages, first, compute, floor):
    """The hook's future: its first collectives once the hook call's own compute (``first``: the
    cast, PowerSGD's M Q) is done, each next stage after the one before and its callback's compute;
    each collective at least ``floor`` seconds: PowerSGD's, whose P and Q are far smaller than the
    buckets the link was learnt from, so the learnt line cannot tell their latency."""
    env = model.env
    work.start = env.now
    if stages and first > 0:
        yield env.timeout(first)
    for k, stage in enumerate(stages):
        work.issued.append(env.now)
        subs = [model.launch(actor, (*work.key, "hook", k, j), n, seconds=_seconds(model, n, floor))
                for j, n in enumerate(stage)]
        yield simpy.AllOf(env, [s.done for s in subs])
        if k < len(compute) and compute[k] > 0:
            yield env.timeout(compute[k])
    if not stages and compute and compute[-1] > 0:
        yield env.timeout(compute[-1])
    work.end = env.now
    work.done.succeed()


def _seconds(model, nbytes: int, floor: float) -> float:
    """A hook collective's time: the link's for what its dtype costs, at least ``floor``."""
    seconds = model.link.allreduce_s(comm_hooks.priced_bytes(model.hook, nbytes, model.hook_rates), model.world_size)
    return max(seconds, floor)


def synced_steps(plans) -> dict[int, int]:
    """Micro-step -> how many synced steps came before it (PowerSGD counts those: ``state.iter``)."""
    out, n = {}, 0
    for p in plans:
        out[p.iteration] = n
        n += p.sync
    return out
