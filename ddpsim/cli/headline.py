"""The headline lines ``record`` and ``import`` print about the trace they wrote: the iteration time,
the exposed communication and the overlap (``ddpsim.analysis.summarize``), the time between steps
where the iteration time leaves much out, torch's own timing of an iteration beside the recording's,
and Join's line for a run under Join, and whether its ranks shared CPU cores."""
from __future__ import annotations

from ddpsim.analysis import summarize
from ddpsim.analysis.join import join_line
from ddpsim.analysis.period import BETWEEN_SHOWN, between_steps_s
from ddpsim.analysis.shared_cores import shared_cores_line
from ddpsim.analysis.torch_logger import logger_line
from ddpsim.errors import PartialTraceError
from ddpsim.trace import Trace


def step_name(no_sync_every: int | None) -> str:
    """What a time per step is of: an iteration, or a micro-step under no_sync (``record``, ``import``
    and ``simulate`` word it alike)."""
    every = no_sync_every or 1
    return f"micro-step (a sync every {every}; the times are per micro-step)" if every > 1 else "iteration"


def headline_lines(trace: Trace, head: str) -> list[str]:
    """``head`` and the headline numbers; the time between steps where it is much; Join's line; ranks
    that shared cores (``analysis.shared_cores``)."""
    try:
        summary = summarize(trace)
    except PartialTraceError:  # e.g. --iters 2 --no-sync-every 4: every step accumulated under no_sync
        why = ("the profile shows no allreduce in any step" if trace.imported
               else "no step ran an allreduce: every step accumulated under no_sync")
        return [f"{head}; no synced iteration ({why}), so no iteration time to report"]
    t = summary["iteration_time_s"]
    overlap = (f"overlap {summary['overlap_fraction']:.0%}" if summary.get("communicates", True)
               else "no overlap to measure (no collective communicated)")
    every = (trace.meta.get("options") or {}).get("no_sync_every")
    step = step_name(every if isinstance(every, int) else None)
    lines = [f"{head}; {step} {t * 1e3:.1f} ms, exposed comm {summary['exposed_comm_s'] * 1e3:.1f} ms, {overlap}"]
    gap = between_steps_s(trace)
    if gap is not None and gap > BETWEEN_SHOWN * t:
        lines.append(f"between steps {gap * 1e3:.1f} ms (median, after each step's end and before the next forward), "
                     f"outside the iteration time: a step takes about {(t + gap) * 1e3:.1f} ms; for a throughput, "
                     "divide the batch by that")
    if (logged := logger_line(trace)) is not None:  # Note [Torch's logger as a second clock]
        lines.append(logged)
    if (joined := join_line(trace)) is not None:
        lines.append(joined)
    if (shared := shared_cores_line(trace)) is not None:
        lines.append(f"note: {shared}")
    return lines
