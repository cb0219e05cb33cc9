"""Uneven inputs under Join in the simulator (Note [Join] in ddpsim/minddp/join.py).

Rank r has data for ``iters - uneven * r`` micro-steps (``record --uneven``). Once its data runs
out, a rank inside ``model.join()`` does no compute: for each micro-step the others still run it
shadows their collectives (``_DDPJoinHook.main_hook``): the buffer broadcast, and in a synced step
each bucket of the layout in effect through the comm hook, launched together
(``_match_all_reduce_for_bwd_pass`` runs ``_run_comm_hook`` on zeros: DDP's allreduce, or the
registered hook's collectives, none for noop), plus the used-parameter bitmap with
find_unused_parameters. A collective starts when every rank has launched it, so a joined rank never
makes the others wait. When every rank is out of data, all of them take the last joiner's
parameters (``_sync_final_model``: one broadcast of the parameters and buffers). The tiny
allreduces Join adds to each forward (a 4-byte flag, twice) are left out: on the recordings here
they are inside the learnt forward time.
"""
from __future__ import annotations

import simpy


def data_steps(iters: int, uneven: int, rank: int) -> int:
    """Micro-steps rank ``rank`` has data for (``RecordConfig.iters_for``)."""
    return iters - uneven * rank


def shadow(env, model, actor, plan):
    """A joined rank's pass through Join's loop for micro-step ``plan.iteration``: (start, end,
    [(launch, Work)]) for the trace."""
    start, works = env.now, []
    if plan.buffers:  # _check_and_sync_module_buffers
        cast = model.launch(actor, (plan.iteration, "buffers"), model.w.buffer_bytes, "broadcast", model.broadcast_s)
        yield cast.done
    if plan.sync:  # check_global_requires_backward_grad_sync said the others reduce this step
        nbytes = model.bucket_bytes[plan.layout_id]
        works = [(env.now, model.run_comm_hook(actor, plan, b, nbytes[b])) for b in range(len(nbytes))]
        if plan.bitmap:
            model.launch(actor, (plan.iteration, "bitmap"), model.bitmap_bytes)
        pending = [w.done for _, w in works if not w.done.processed]
        if pending:
            yield simpy.AllOf(env, pending)
    if actor.join_start is None:
        actor.join_start = start
    actor.shadows.append((plan.iteration, start, env.now, works))


def final_sync(env, model, actor):
    """``_sync_final_model``: every rank, once all have joined, receives the last joiner's model."""
    if actor.join_start is None:
        actor.join_start = env.now
    nbytes = sum(p.bytes for p in model.w.params) + (model.w.buffer_bytes if model.final_sync_buffers else 0)
    cast = model.launch(actor, ("join", "final"), nbytes, "broadcast")
    yield cast.done
    actor.join_end = env.now
