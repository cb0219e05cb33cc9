"""A GPU profile's busy kernels, carried from a recorded iteration to a simulated one.

An import keeps when the GPU's compute kernels ran (``Iteration.compute_busy``: Note [Compute is the
GPU's busy kernels] in metrics.py). The simulator has no kernels: it plays each phase of the compute
as one stretch of time. Note [The recorded busy time, stretched]: to give a simulation of such a run
the same overlap figure as HTA gives the run, each phase of a recorded iteration (the forward, the
backward up to its last gradient, the backward after it, the optimizer) keeps
where inside it the GPU was busy, as fractions of the phase (``pattern_of``), and a simulated
iteration lays them over its own phases of the same name (``lay_over``): a phase the simulator
makes longer or shorter keeps its share of idle time. A replay of the run then gives back its
figure; a what-if keeps the recorded idle share of each phase (the GPU's idle time between
kernels is assumed to scale with the compute, which a faster GPU or another batch would not keep).
"""
from __future__ import annotations

from ddpsim.trace import Iteration, Span

Phase = tuple[str, int, int]  # (name, start, end): "forward", "backward" (to its last gradient), "after", "optimizer"


def phases(it: Iteration) -> list[Phase]:
    """The compute phases of ``it`` in time order (Note [The recorded busy time, stretched])."""
    cut = max(it.backward.start_ns, it.backward_compute_end_ns)
    out: list[Phase] = [("forward", it.forward.start_ns, it.forward.end_ns), ("backward", it.backward.start_ns, cut),
                        ("after", cut, it.optimizer.start_ns if it.optimizer else it.end_ns)]
    if it.optimizer:
        out.append(("optimizer", it.optimizer.start_ns, it.optimizer.end_ns))
    return out


def pattern_of(it: Iteration) -> dict:
    """Where ``it``'s GPU was busy inside each of its phases, as fractions of the phase: {name: [(a, b)]}."""
    out = {}
    for name, lo, hi in phases(it):
        if hi > lo:
            out[name] = [((s - lo) / (hi - lo), (e - lo) / (hi - lo)) for s, e in it.busy(lo, hi)]
    return out


def lay_over(it: Iteration, pattern: dict) -> list[Span]:
    """``pattern`` (``pattern_of`` a recorded iteration) laid over ``it``'s phases: its busy spans in
    time order. A phase the recording did not have is busy all through."""
    out: list[Span] = []
    for name, lo, hi in phases(it):
        if hi <= lo:
            continue
        for a, b in pattern.get(name, [(0.0, 1.0)]):
            s, e = lo + round(a * (hi - lo)), lo + round(b * (hi - lo))
            if out and s <= out[-1].end_ns:  # spans that meet at a phase boundary
                out[-1] = Span(out[-1].start_ns, max(out[-1].end_ns, e))
            elif e > s:
                out.append(Span(s, e))
    return out


def lay_busy(trace, patterns: list[list[dict]]) -> None:
    """Give each simulated iteration of ``trace`` the busy spans of recorded rank ``rank mod R``'s
    iteration ``k mod n`` (``patterns``: per recorded rank, per recorded iteration, ``pattern_of``);
    ranks that share one timeline take the first one's."""
    done: set[int] = set()
    for r in trace.ranks:
        mine = patterns[r.rank % len(patterns)]
        for k, it in enumerate(r.iterations):
            if id(it) not in done and mine:
                it.compute_busy = lay_over(it, mine[k % len(mine)])
                done.add(id(it))


def busy_patterns(trace) -> list[list[dict]] | None:
    """Per rank, per iteration with busy spans, ``pattern_of`` it: what ``lay_busy`` lays over a
    simulation; None where the trace has none (a recording, a simulation)."""
    out = [[pattern_of(it) for it in r.iterations if it.compute_busy is not None] for r in trace.ranks]
    return out if any(out) else None
