"""Recording under torch's ``Join`` (``record --uneven K --join``): Note [Join] in minddp/join.py.

A rank trains on its own batches inside ``model.join()``; once they run out, each pass of the rank
through Join's loop (``_DDPJoinHook.main_hook``, matching one iteration of the others) is recorded
as a shadow step with the zero-filled bucket allreduces it issued, which reach the recorder's comm
hook (torch) or minddp's recorder like any bucket. The shard ends with the join's span.

Note [Join's divisor in the recorder's hook]: with a comm hook registered torch's reducer does not
divide gradients (the hook does; ``copy_grad_to_bucket``), so ``divide_by_initial_world_size=False``
reaches DDP's default allreduce only. The recorder's hook divides by the number of ranks that still
have data at the iteration, which the recording knows from ``--uneven`` and which is the number
Join's allreduce of ones counts: the same mean as torch's DDP without a hook.
"""
from __future__ import annotations

import itertools

from ddpsim import heartbeat, torchcompat
from ddpsim.events import now_ns


def train_joined(run, n: int) -> None:
    """``--join``: this rank's ``n`` batches inside ``model.join()`` (Note [Join] in minddp/join.py).
    Each pass of this rank through Join's loop after its data ran out is recorded as a shadow step."""
    cfg, rec = run.cfg, run.recorder
    join = run.ddp.join(divide_by_initial_world_size=cfg.divide_by_initial_world_size)
    for hook in torchcompat.join_hooks(join):
        hook.main_hook = _shadowed(hook.main_hook, run, n)
    with join:
        for it in range(n):
            run.step(it)
        start = now_ns()
    rec.join(start, now_ns(), cfg.divide_by_initial_world_size)


def _shadowed(main_hook, run, first: int):
    """``_DDPJoinHook.main_hook``, recorded: the k-th call shadows the others' iteration first + k."""
    iterations = itertools.count(first)

    def shadow():
        it = next(iterations)
        heartbeat.beat(iteration=it, phase="Join's shadow")
        run.recorder.begin_shadow(it, now_ns())
        if run.timer:
            run.timer.anchor()
        main_hook()
        if run.timer:
            run.timer.resolve()
        run.recorder.end_shadow(now_ns())
    return shadow
