"""One line of words for a figure's title: which run this is, and what kind of iteration.

Used by the timeline (``ddpsim.viz.timeline``) and the side-by-side comparison
(``ddpsim.viz.compare``).
"""
from __future__ import annotations

from ddpsim.trace import Trace


def describe_iteration(trace: Trace, iteration: int) -> str:
    """One line saying what kind of iteration this is, e.g. the layout in effect: on the lowest-numbered rank
    that recorded it (rank 0 but where its data ran out under Join), else ``Trace.longest_rank``."""
    rank = next((r for r in trace.ranks if r.iteration(iteration) is not None), trace.longest_rank)
    it = rank.iteration(iteration)
    if it is not None and not it.sync:
        return f"iteration {iteration}: no_sync step (gradients accumulate locally, no allreduce)"
    layout = rank.layout_at(iteration)
    if layout is None:
        return f"iteration {iteration}"
    n = len(layout.buckets)
    if layout.kind == "construction":
        what = ("single bucket (construction layout)" if n == 1
                else f"construction layout, {n} buckets")
    else:
        what = f"{layout.kind} layout, {n} bucket{'s' if n != 1 else ''}"
        if layout.from_iteration == iteration and iteration > 0:
            what += ", the first allreduce on the rebuilt buckets"
    accumulated = 0  # no_sync micro-steps just before this synced one
    for x in sorted((x for x in rank.iterations if x.iteration < iteration),
                    key=lambda x: -x.iteration):
        if x.sync:
            break
        accumulated += 1
    if accumulated:
        what += f"; reduces grads accumulated over {accumulated + 1} micro-steps"
    return f"iteration {iteration}: {what}"


def describe_run(trace: Trace) -> str:
    m = trace.meta
    model = m.get("model") or (m.get("workload") or {}).get("name") or "model ?"
    parts = [str(model), str(m.get("impl") or "torch")]
    if m.get("backend"):
        parts.append(str(m["backend"]))
    parts.append(f"world size {trace.world_size}")
    if trace.source == "simulated":
        parts.append("simulated")
    return " · ".join(parts)
