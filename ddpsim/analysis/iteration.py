"""One iteration, as the Timeline page shows it beside the steady state."""
from __future__ import annotations

from ddpsim.analysis.metrics import comm_end_ns, cycle_metrics, enqueue_gap, steady_summary
from ddpsim.trace import Trace


def iteration_report(trace: Trace, iteration: int) -> dict:
    """What one iteration did, next to the steady state.

    ``metrics``: ``cycle_metrics`` of the iteration alone, with exposed communication and
    overlap None when it reduced nothing (a no_sync step); ``steady``: ``steady_summary``
    (None for a partial run); ``enqueue_gap``: on a GPU trace, how long after the CPU
    queued each gradient's work the GPU finished it; ``span_ms``: from the iteration's
    first forward start to its last end or allreduce completion, in ms (rounded up a little).
    """
    its = trace.iteration_on_ranks(iteration)
    if not its:
        raise KeyError(f"no rank recorded iteration {iteration}")
    synced = any(it.sync for it in its)
    this = cycle_metrics(trace, [iteration])
    t0 = min(it.forward.start_ns for it in its)
    end = max(max(it.end_ns, comm_end_ns(it) or 0) for it in its)
    return {"metrics": {k: v if synced or k == "iteration_time_s" else None for k, v in this.items()},
            "steady": steady_summary(trace), "enqueue_gap": enqueue_gap(trace, iteration),
            "span_ms": round(end * 1e-6 - t0 * 1e-6, 1) + 0.1}
