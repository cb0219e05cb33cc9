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

from ddpsim.analysis.intervals import merged
from ddpsim.trace import Iteration, Span

# ns: gaps between a recording's kernels shorter than this are kept busy in a simulation (most are the
# 1-2.5 us between back-to-back launches; on the H100 ResNet-18 import 413 spans an iteration become
# 114, 0.3 ms of its 38 ms idle is lost, and its replay's overlap is 21.4% where the exact pattern gave
# 20.8% and the recording 20.1%; a 66-row What-if sweep at 8 ranks laid them for 10 s, now 3 s)
MIN_GAP_NS = 2_000
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
    "after" as [(ns before the phase's end it started, ... it ended)]; "sync": the step's kind.
    Gaps under ``MIN_GAP_NS`` are closed."""
    out: dict = {"sync": it.sync}
    for name, lo, hi in phases(it):
        if name == "after":
            out[name] = [(hi - s, hi - e) for s, e in merged(it.busy(lo, hi), MIN_GAP_NS)]
        elif hi > lo:
            out[name] = [((s - lo) / (hi - lo), (e - lo) / (hi - lo)) for s, e in merged(it.busy(lo, hi), MIN_GAP_NS)]
    return out


def lay_over(it: Iteration, pattern: dict) -> list[Span]:
    """``pattern`` (``pattern_of`` a recorded iteration) laid over ``it``'s phases: its busy spans in
    time order. A compute phase the recording did not have is busy all through, an "after" idle."""
    spans: list[tuple[int, int]] = []
    for name, lo, hi in phases(it):
        if hi <= lo:
            continue
        if name == "after":
            spans += [(max(lo, hi - a), hi - b) for a, b in pattern.get(name, ())]
        else:  # int(x + 0.5): round() is the slow part of a sweep's thousands of iterations
            d = hi - lo
            spans += [(lo + int(a * d + 0.5), lo + int(b * d + 0.5)) for a, b in pattern.get(name, ((0.0, 1.0),))]
    return [Span(s, e) for s, e in merged(spans) if e > s]  # spans that meet at a phase boundary: one


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
