"""The ddpsim trace: one format for real and simulated DDP runs.

Every part of ddpsim speaks this format: the recorder writes it, the readable DDP
writes it, the simulator writes it, and the analyses, figures, app and notebooks
read it. The field-by-field reference, with units, is ``docs/trace-format.md``.
The data classes are in ``types.py``, the strict reader (Note [A strict
reader]) in ``reader.py``, ``save_trace`` (which writes only what the reader
accepts) in ``writer.py``; this module is the one to import.

Times are integer nanoseconds on one aligned clock for all ranks, counted from
the start of the run (``t_ns = 0``). Sizes are bytes.

    >>> trace = load_trace("run.json")          # doctest: +SKIP
    >>> trace.ranks[0].iterations[1].buckets     # doctest: +SKIP
"""
from ddpsim.trace.reader import MAX_TRACE_BYTES, from_dict, load_trace, parse_trace
from ddpsim.trace.same_run import quiet_ranks
from ddpsim.trace.types import (CARRIED, FORMAT, SOURCES, VERSION, Bucket, BucketEvent, Collective, GradReady, HookCollective,
                                Iteration, JoinRecord, Layout, Param, RankTrace, ShadowStep, Span, Trace, TraceFormatError)
from ddpsim.trace.writer import save_trace

__all__ = ["CARRIED", "FORMAT", "MAX_TRACE_BYTES", "SOURCES", "VERSION", "Bucket", "BucketEvent", "Collective", "GradReady",
           "HookCollective", "Iteration", "JoinRecord", "Layout", "Param", "RankTrace", "ShadowStep", "Span", "Trace", "TraceFormatError", "from_dict",
           "load_trace", "parse_trace", "quiet_ranks", "save_trace"]
