"""The headline lines ``record`` and ``import`` print about the trace they wrote: the iteration time,
the exposed communication and the overlap (``ddpsim.analysis.summarize``), the step period where
the iteration time leaves much of it out, and Join's line for a run under Join."""
from __future__ import annotations

from ddpsim.analysis import summarize
from ddpsim.analysis.join import join_line
from ddpsim.analysis.period import PERIOD_SHOWN, step_period_s
from ddpsim.errors import PartialTraceError
from ddpsim.trace import Trace


def headline_lines(trace: Trace, head: str) -> list[str]:
    """``head`` and the headline numbers; the step period's line where it differs; Join's line."""
    try:
        summary = summarize(trace)
    except PartialTraceError:  # e.g. --iters 2 --no-sync-every 4: every step accumulated under no_sync
        return [f"{head}; no synced iteration (no step ran an allreduce: every step accumulated under "
                "no_sync), so no iteration time to report"]
    t = summary["iteration_time_s"]
    overlap = (f"overlap {summary['overlap_fraction']:.0%}" if summary.get("communicates", True)
               else "no overlap to measure (no collective took time)")
    lines = [f"{head}; iteration {t * 1e3:.1f} ms, exposed comm {summary['exposed_comm_s'] * 1e3:.1f} ms, {overlap}"]
    period = step_period_s(trace)
    if period is not None and period > PERIOD_SHOWN * t:
        lines.append(f"step period {period * 1e3:.1f} ms (forward start to the next forward start, median): "
                     f"{(period - t) * 1e3:.1f} ms of each step is after the optimizer and before the next "
                     "forward, outside the iteration time; for a throughput, divide the batch by the step period")
    if (joined := join_line(trace)) is not None:
        lines.append(joined)
    return lines
