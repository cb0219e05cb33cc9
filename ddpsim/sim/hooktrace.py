"""A hooked bucket's pieces in the simulated trace: the fields ``record --comm-hook`` writes.

A recording with a comm hook notes, per bucket, every collective the hook issued and the hook's
compute before the first and after the last (``collectives``, ``compress_ns``, ``decompress_ns``;
docs/trace-format.md). A simulated run with a hook writes the same fields from what the simpy
model did (``sim/hooked.py``): each stage's collectives, issued on this rank when ``_stages`` issued
them (the first after the hook call's own compute, the next ones when the stage before has
completed and its callback's compute is done), each complete when its ``Work`` is. So both kinds
of trace can be drawn, read and compared alike.
"""
from __future__ import annotations

from ddpsim.sim import comm_hooks, hooked
from ddpsim.trace import HookCollective


def _ns(t: float) -> int:
    return int(round(t * 1e9))


def hook_fields(model, plan, b: int, launch: float, work) -> dict:
    """``BucketEvent``'s hook fields for bucket ``b`` of ``plan`` on one rank, as keyword arguments;
    ``{}`` without a hook, so a plain run writes what it always wrote.

    ``launch``: the hook's call on this rank (s); ``work``: the bucket's ``Work`` on this rank (the
    hook's future), which notes when ``hooked._stages`` issued each stage (``Work.issued``)."""
    if model.hook is None:
        return {}
    stages = hooked.hook_plan(model, plan, b)[0]
    params = [model.w.params[i] for i in model.layouts[plan.layout_id][b]]
    dtype = comm_hooks.SENT_DTYPE.get(model.hook.name, params[0].dtype if params else "float32")
    group = str(comm_hooks.group_of(model.hook, b))  # "0": the default group; round-robin: i mod N
    out = []
    for k, (stage, issued) in enumerate(zip(stages, work.issued)):
        works = [model.collectives[(plan.iteration, b, "hook", k, j)] for j in range(len(stage))]
        out += [HookCollective("all_reduce", w.nbytes, dtype, group, model.world_size, _ns(issued), _ns(w.end))
                for w in works]
    start, end = _ns(launch), _ns(work.end)
    compress = (out[0].launch_ns if out else end) - start
    decompress = end - out[-1].complete_ns if out else 0
    return {"collectives": out, "compress_ns": compress, "decompress_ns": decompress}
