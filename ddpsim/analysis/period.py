"""The step period: a steady step's time from one forward start to the next, beside the iteration time,
which leaves out the time between steps (``ITERATION_TIME``, the one definition the app's metric help,
the CLI and docs/usage.md use)."""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import steady_cycles
from ddpsim.trace import Trace

# The iteration time's one definition, in the app's metric help and docs/usage.md alike (the step
# period's line below says it with the trace's numbers).
ITERATION_TIME = ("The iteration time runs from the forward's start to the optimizer's end, so it leaves out "
                  "the time between steps (data loading, the profiler's step, the rest of the training loop): "
                  "a throughput is the batch over the step period, forward start to the next forward start.")
PERIOD_SHOWN = 1.05  # the step period is printed when it is longer than the iteration time by more than 5%


def step_period_s(trace: Trace) -> float | None:
    """The median time from a steady cycle's first forward start (the earliest rank's) to the next
    cycle's, per micro-step (as the iteration time is); None without two consecutive steady cycles."""
    cycles = steady_cycles(trace)
    starts: dict[int, int] = {}
    for rank in trace.ranks:
        for it in rank.iterations:
            starts[it.iteration] = min(starts.get(it.iteration, it.forward.start_ns), it.forward.start_ns)
    periods = [(starts[b[0]] - starts[a[0]]) / len(a) for a, b in zip(cycles, cycles[1:])
               if b[0] == a[-1] + 1 and a[0] in starts and b[0] in starts]
    return statistics.median(periods) * 1e-9 if periods else None
