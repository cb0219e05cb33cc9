"""The time between steps: after one step's optimizer, before the next step's forward, which the
iteration time leaves out (``ITERATION_TIME``, the one definition the app's metric help, the CLI
and docs/usage.md use)."""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import between_micro_steps_ns, steady_cycles
from ddpsim.trace import Trace

ITERATION_TIME = ("The iteration time runs from the forward's start to the optimizer's end, so it leaves out "
                  "the time between steps (data loading, the profiler's step, the rest of the training loop): "
                  "a throughput is the batch over the iteration time plus that time between steps.")
BETWEEN_SHOWN = 0.05  # the time between steps is printed where it is more than 5% of the iteration time


def between_steps_s(trace: Trace) -> float | None:
    """The median time from a steady cycle's end (its last rank's) to the next cycle's first forward
    start (its first rank's), with the time between the cycle's own micro-steps that the iteration
    time leaves out too (Note [The time between steps is left out] in metrics.py), per micro-step as
    the iteration time is. With one steady no_sync cycle (6 micro-steps, a sync every 3), the mean gap
    inside it; None otherwise. Each gap is one pair's own, so it never mixes two sets of iterations."""
    cycles = steady_cycles(trace)
    starts: dict[int, int] = {}
    ends: dict[int, int] = {}
    for rank in trace.ranks:
        for it in rank.iterations:
            starts[it.iteration] = min(starts.get(it.iteration, it.forward.start_ns), it.forward.start_ns)
            ends[it.iteration] = max(ends.get(it.iteration, it.end_ns), it.end_ns)
    gaps = [(max(0, starts[b[0]] - ends[a[-1]]) + between_micro_steps_ns(trace, a)) / len(a)
            for a, b in zip(cycles, cycles[1:])
            if b[0] == a[-1] + 1 and a[-1] in ends and b[0] in starts]
    if not gaps and len(cycles) == 1 and len(cycles[0]) > 1:  # one steady no_sync cycle: the gaps inside it
        gaps = [between_micro_steps_ns(trace, cycles[0]) / (len(cycles[0]) - 1)]
    return statistics.median(gaps) * 1e-9 if gaps else None
