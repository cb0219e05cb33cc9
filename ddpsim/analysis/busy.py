"""A GPU profile's busy kernels, carried from a recorded iteration to a simulated one.

An import keeps when the GPU's compute kernels ran (``Iteration.compute_busy``: Note [Compute is the
GPU's busy kernels] in metrics.py). The simulator has no kernels: it plays each phase of the compute
as one stretch of time. Note [The recorded busy time, stretched]: to give a simulation of such a run
the same overlap figure as HTA gives the run, each compute phase of a recorded iteration (the
forward, the backward up to its last gradient, the optimizer) keeps where inside it the GPU was
busy, as fractions of the phase (``pattern_of``), and a simulated iteration lays them over its own
phase of the same name (``lay_over``): a phase the simulator makes longer or shorter keeps its share
of idle time (the GPU's idle time between kernels is assumed to scale with the compute, which a
faster GPU or another batch would not keep). The time after the last gradient is not stretched:
it is mostly the wait for the last allreduces, and what the GPU computes there (finalize_backward
copying the buckets back into the gradients, once the allreduces are done) keeps its recorded
length at the phase's end; a longer wait is idle. A simulated step takes a recorded step of the
same kind (synced or no_sync), in turn.
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
    """Where ``it``'s GPU was busy in each phase: {name: [(a, b)]} as fractions of the phase, and
    "after" as [(ns before the phase's end it started, ... it ended)]; "sync": the step's kind."""
    out: dict = {"sync": it.sync}
    for name, lo, hi in phases(it):
        if name == "after":
            out[name] = [(hi - s, hi - e) for s, e in it.busy(lo, hi)]
        elif hi > lo:
            out[name] = [((s - lo) / (hi - lo), (e - lo) / (hi - lo)) for s, e in it.busy(lo, hi)]
    return out


def lay_over(it: Iteration, pattern: dict) -> list[Span]:
    """``pattern`` (``pattern_of`` a recorded iteration) laid over ``it``'s phases: its busy spans in
    time order. A compute phase the recording did not have is busy all through, an "after" idle."""
    out: list[Span] = []
    for name, lo, hi in phases(it):
        if hi <= lo:
            continue
        if name == "after":
            spans = [(max(lo, hi - a), hi - b) for a, b in pattern.get(name, [])]
        else:
            spans = [(lo + round(a * (hi - lo)), lo + round(b * (hi - lo))) for a, b in pattern.get(name, [(0.0, 1.0)])]
        for s, e in spans:
            if out and s <= out[-1].end_ns:  # spans that meet at a phase boundary
                out[-1] = Span(out[-1].start_ns, max(out[-1].end_ns, e))
            elif e > s:
                out.append(Span(s, e))
    return out


def lay_busy(trace, patterns: list[list[dict]]) -> None:
    """Give each simulated iteration of ``trace`` the busy spans of a recorded step of its kind
    (synced or no_sync; of any kind where there is none), recorded rank ``rank mod R``'s, in turn
    (``patterns``: ``busy_patterns``); ranks that share one timeline take the first one's."""
    done: set[int] = set()
    for r in trace.ranks:
        mine = patterns[r.rank % len(patterns)]
        kinds = {sync: [p for p in mine if p["sync"] == sync] or mine for sync in (True, False)}
        turn = {True: 0, False: 0}
        for it in r.iterations:
            if id(it) not in done:
                it.compute_busy = lay_over(it, kinds[it.sync][turn[it.sync] % len(kinds[it.sync])])
                done.add(id(it))
            turn[it.sync] += 1


def busy_patterns(trace) -> list[list[dict]] | None:
    """Per recorded rank with busy spans, ``pattern_of`` each such iteration: what ``lay_busy`` lays
    over a simulation; None where the trace has none (a recording, a simulation)."""
    out = [[pattern_of(it) for it in r.iterations if it.compute_busy is not None] for r in trace.ranks]
    return [p for p in out if p] or None
