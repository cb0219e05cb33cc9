"""ddpsim: see, re-implement and simulate PyTorch DistributedDataParallel.

Layers, from the bottom up (each imports only those below it; docs/architecture.md):
  shared ideas   events, buckets, torchcompat, errors, ranks, models
  trace format   ddpsim.trace (load_trace), kineto import, bundled samples
  analysis       ddpsim.analysis: functions from a trace to numbers and tables
  minddp         a readable DDP;  record: real runs;  sim: the DDP model (a Workload in)
  learn          a Workload from a trace;  experiments: real runs against predictions
  cli, viz, app  the command line, matplotlib figures, the dashboard and the grader
"""
from ddpsim.trace import Trace, TraceFormatError, load_trace, parse_trace, save_trace

__version__ = "0.1.0"
__all__ = ["Trace", "TraceFormatError", "load_trace", "parse_trace", "save_trace", "__version__"]
