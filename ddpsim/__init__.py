"""ddpsim: see, re-implement and simulate PyTorch DistributedDataParallel.

Layers, from the bottom up (each uses only those below it):
  ddpsim.record    real multi-process DDP runs, instrumented      -> shards, trace
  ddpsim.trace     the trace format (real and simulated alike)   -> load_trace()
  ddpsim.analysis  functions from a trace to numbers and tables
  ddpsim.viz       matplotlib figures from traces and tables
  app.py, notebooks/  the dashboard and the walkthroughs
"""
from ddpsim.trace import Trace, TraceFormatError, load_trace, parse_trace

__version__ = "0.1.0"
__all__ = ["Trace", "TraceFormatError", "load_trace", "parse_trace", "__version__"]
