"""Whether a recording needs find_unused_parameters, or cannot run under static_graph.

A model whose parameters take part only in some iterations or on some ranks (the zoo's ``branchy``)
runs only with ``find_unused_parameters=True``: without it torch waits for a gradient that never
comes and fails at the next forward ("Expected to have finished reduction in the prior iteration").
The recording shows such a parameter in a synchronised iteration either marked ready without being
computed (``GradReady.unused``: torch's find_unused_parameters, as the recorder's probe sees it) or
absent from that iteration's gradient-ready events while present in others (minddp's recording
leaves it out). A parameter that never gets a gradient is the simulator's own refusal (``sim.plan``);
one that gets a gradient only sometimes is learnt as used, so this says it.

static_graph learns the used parameters in the first iteration and needs the same ones in every
later one, whatever find_unused_parameters says (reducer.cpp's ``dynamic_graph_find_unused()`` is
``!static_graph_ && find_unused_parameters_``): a rank whose unused set changes fails there.
"""
from __future__ import annotations

from ddpsim.trace import Trace


def unused_sets(trace: Trace) -> dict[int, list[tuple[int, frozenset[int]]]]:
    """Per rank, its synchronised iterations in order, each with the parameters that got no gradient there."""
    recorded = {g.param for r in trace.ranks for it in r.iterations for g in it.grad_ready}
    out = {}
    for r in trace.ranks:
        its = [it for it in r.iterations if it.sync and it.grad_ready]
        out[r.rank] = [(it.iteration, frozenset(recorded - {g.param for g in it.grad_ready if not g.unused}))
                       for it in its]
    return out


def marked_unused(trace: Trace) -> tuple[str, int, int] | None:
    """(parameter name, rank, iteration) of the first parameter that got no gradient in a synchronised
    iteration of the recording, or None."""
    names = _names(trace)
    for rank, its in unused_sets(trace).items():
        for iteration, unused in its:
            if unused:
                return names.get(min(unused), f"parameter {min(unused)}"), rank, iteration
    return None


def graph_changes(trace: Trace) -> tuple[str, int, int, int, bool] | None:
    """(parameter name, rank, first iteration, iteration, used first) where a rank's unused parameters
    first differ from its first synchronised iteration's (static_graph cannot run it), or None."""
    names = _names(trace)
    for rank, its in unused_sets(trace).items():
        for iteration, unused in its[1:]:
            if (changed := unused ^ its[0][1]):
                param = min(changed)
                return names.get(param, f"parameter {param}"), rank, its[0][0], iteration, param not in its[0][1]
    return None


def refusal(trace: Trace | None, find_unused_parameters: bool, static_graph: bool = False) -> tuple[str, str] | None:
    """(the option torch fails with, why in one line) when the configuration cannot run the recorded model:
    ``static_graph=True`` with the used parameters changing, or ``find_unused_parameters=False`` with a
    parameter unused in some iteration; else None."""
    if trace is None:
        return None
    if static_graph:
        if (change := graph_changes(trace)) is None:
            return None
        name, rank, first, iteration, used_first = change
        then, now = ("used", "unused") if used_first else ("unused", "used")
        torch_says = ("Expected to have finished reduction in the prior iteration ... this is not compatible with "
                      "static_graph set to True" if used_first else "Your training graph has changed in this iteration")
        return "static_graph=True", (
            f"{name} is {then} on rank {rank} in iteration {first} of the recording and {now} in iteration {iteration}, "
            f"so torch fails (\"{torch_says}\"): static_graph needs the same parameters used every iteration")
    if find_unused_parameters or (seen := marked_unused(trace)) is None:
        return None
    name, rank, iteration = seen
    return "find_unused_parameters=False", (
        f"{name} got no gradient on rank {rank} in iteration {iteration} of the recording, so torch fails at the "
        "next forward (\"Expected to have finished reduction in the prior iteration\") unless find_unused_parameters=True")


def needs_find_unused(trace: Trace | None, static_graph: bool = False) -> str | None:
    """Why find_unused_parameters must stay on for the recorded model (``refusal``'s line), or None."""
    found = refusal(trace, False, static_graph)
    return found[1] if found is not None and found[0] == "find_unused_parameters=False" else None


def _names(trace: Trace) -> dict[int, str]:
    return {p.index: p.name for p in trace.params if p.index is not None}
