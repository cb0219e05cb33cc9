"""ddpsim.analysis: functions from a Trace to numbers and tables, above the trace format.

    >>> from ddpsim.analysis import TraceAnalysis, summarize
    >>> summarize(trace)["iteration_time_s"]
    >>> TraceAnalysis(trace).bucket_table(5)

Modules: metrics (iteration time, exposed communication, overlap, steady state;
their definitions are in its docstring), phases (forward, backward compute, tail,
optimizer), iteration (one iteration beside the steady state), intervals (span arithmetic),
busy (a GPU profile's busy kernels carried into a simulation), unused (a recording that
needs find_unused_parameters). ``TraceAnalysis`` holds one trace and offers the analyses as
methods, as HolisticTraceAnalysis's ``TraceAnalysis`` does: the trace format itself knows
nothing of them.
"""
from __future__ import annotations

from ddpsim.analysis.intervals import covered_fraction, covered_ns, union_ns
from ddpsim.analysis.iteration import iteration_report
from ddpsim.analysis.metrics import (NS, bucket_table, comm_end_ns, comm_overlap, comm_weighted_overlap,
                                     cycle_metrics, cycles, enqueue_gap, exposed_comm_ns, grad_ready_order,
                                     overlap_fraction, rank_overlaps, spread, steady_cycles, steady_summary, summarize)
from ddpsim.analysis.phases import PHASES, phase_medians
from ddpsim.trace import Trace


class TraceAnalysis:
    """One trace's analyses as methods (a facade over the functions of this package)."""

    def __init__(self, trace: Trace):
        self.trace = trace

    def summary(self) -> dict:
        """Iteration time, exposed communication and overlap: ``summarize``."""
        return summarize(self.trace)

    def spread(self) -> dict:
        return spread(self.trace)

    def phases(self) -> dict[str, float]:
        return phase_medians(self.trace)

    def iteration(self, iteration: int) -> dict:
        return iteration_report(self.trace, iteration)

    def bucket_table(self, iteration: int) -> list[dict]:
        return bucket_table(self.trace, iteration)

    def grad_ready_order(self, rank: int = 0, iteration: int = 0) -> list[int]:
        return grad_ready_order(self.trace, rank, iteration)


__all__ = ["NS", "PHASES", "TraceAnalysis", "bucket_table", "comm_end_ns", "comm_overlap", "comm_weighted_overlap",
           "covered_fraction", "covered_ns", "cycle_metrics", "cycles", "enqueue_gap", "exposed_comm_ns",
           "grad_ready_order", "iteration_report", "overlap_fraction", "phase_medians", "rank_overlaps", "spread",
           "steady_cycles", "steady_summary", "summarize", "union_ns"]
