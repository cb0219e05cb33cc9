"""Whether a recording needs find_unused_parameters: a parameter it marked unused in some iteration.

A model whose parameters take part only in some iterations or on some ranks (the zoo's ``branchy``)
runs only with ``find_unused_parameters=True``: without it torch waits for a gradient that never
comes and fails at the next forward ("Expected to have finished reduction in the prior iteration").
The recording shows it where find_unused_parameters marked a parameter ready without computing it
(``GradReady.unused``). A parameter that never gets a gradient is the simulator's own refusal
(``sim.plan``); one that gets a gradient only sometimes is learnt as used, so this says it.
"""
from __future__ import annotations

from ddpsim.trace import Trace


def marked_unused(trace: Trace) -> tuple[str, int, int] | None:
    """(parameter name, rank, iteration) of the first parameter the recording marked unused, or None."""
    names = {p.index: p.name for p in trace.params if p.index is not None}
    for r in trace.ranks:
        for it in r.iterations:
            for g in it.grad_ready:
                if g.unused:
                    return names.get(g.param, f"parameter {g.param}"), r.rank, it.iteration
    return None


def needs_find_unused(trace: Trace | None, find_unused_parameters: bool, static_graph: bool = False) -> str | None:
    """One line when a configuration without find_unused_parameters cannot run the recorded model, else None."""
    if trace is None or find_unused_parameters or static_graph or (seen := marked_unused(trace)) is None:
        return None
    name, rank, iteration = seen
    return (f"{name} got no gradient on rank {rank} in iteration {iteration} of the recording, so torch fails at "
            "the next forward (\"Expected to have finished reduction in the prior iteration\") unless "
            "find_unused_parameters=True")
