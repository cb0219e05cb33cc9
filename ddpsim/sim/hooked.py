"""A communication hook in the simpy model (what it sends: ``sim/comm_hooks.py``).

With a hook registered, ``Reducer::run_comm_hook`` hands the bucket to the hook instead of DDP's
own allreduce, and the bucket is done when the hook's future is. Here that future is a ``Work``
that no rank launches: a process issues the hook's collectives stage by stage (each one still
starts only when every rank has launched it) and completes the bucket after the last stage.
Not modelled: the hook's own compute (casting to fp16, PowerSGD's matmuls and orthogonalization).
"""
from __future__ import annotations

import simpy

from ddpsim.sim import comm_hooks

ELEMENT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}  # bytes per gradient element


def launch_bucket(model, actor, plan, b: int, nbytes: int, work_class):
    """Bucket ``b``'s collectives under ``model.hook``; returns the Work the bucket waits on."""
    params = [model.w.params[i] for i in model.layouts[plan.layout_id][b]]
    shapes = [tuple(p.shape) if p.shape else (max(1, p.bytes // ELEMENT_BYTES.get(p.dtype, 4)),) for p in params]
    element = ELEMENT_BYTES.get(params[0].dtype, 4) if params else 4
    stages = comm_hooks.stages(model.hook, shapes, element, model.synced_step[plan.iteration])
    work = work_class((plan.iteration, b), nbytes, 0, model.env.event())
    model.env.process(_stages(model, actor, work, stages))
    return work


def _stages(model, actor, work, stages):
    env = model.env
    work.start = env.now
    for k, stage in enumerate(stages):
        subs = [model.launch(actor, (*work.key, "hook", k, j), n) for j, n in enumerate(stage)]
        yield simpy.AllOf(env, [s.done for s in subs])
    work.end = env.now
    work.done.succeed()


def synced_steps(plans) -> dict[int, int]:
    """Micro-step -> how many synced steps came before it (PowerSGD counts those: ``state.iter``)."""
    out, n = {}, 0
    for p in plans:
        out[p.iteration] = n
        n += p.sync
    return out
