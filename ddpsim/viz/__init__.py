"""Figures: matplotlib drawings of traces and analysis tables (no Streamlit here).

Every function returns a ``matplotlib.figure.Figure`` built without pyplot, so
figures never leak into global state; show one with ``st.pyplot(fig)`` in the
app, or ``fig.savefig(...)`` anywhere else (``figure_bytes`` gives PNG/SVG bytes).

- ``plot_timeline``: one iteration, rank by rank (timeline.py; a comm hook inside each bucket: hookspan.py)
- ``plot_buckets``: arrival order and bucket layouts (buckets.py)
- ``plot_compare``: several runs on one time axis; ``compare_rows`` (compare.py)
- ``plot_sweep``: iteration time / exposed comm against bucket size (sweep.py)
- ``plot_scaling``: one iteration's parts (compute, exposed comm, waiting for stragglers) by world size (scaling.py)
- ``plot_ladder``: naive -> overlap -> bucketed -> torch's DDP, measured and simulated (ladder.py)
- ``describe_iteration``: the one-line title of an iteration (describe.py)
- ``plot_accuracy``: predicted against measured for every validation run (accuracy.py)
- ``plot_dataparallel``: a SIMULATED nn.DataParallel iteration beside DDP's (dataparallel.py)
- ``plot_compression``: SIMULATED iteration time against bandwidth per comm hook (compression.py)

Bucket ``i`` has the colour ``bucket_color(i)`` in every view.
"""
from ddpsim.viz.accuracy import plot_accuracy
from ddpsim.viz.buckets import bucket_rows, numbering, plot_buckets
from ddpsim.viz.compression import plot_compression
from ddpsim.viz.compare import (compare_rows, short_names, typical_iteration, plot_compare, steady_iteration,
                                 usable_runs)
from ddpsim.viz.dataparallel import plot_dataparallel
from ddpsim.viz.describe import describe_iteration
from ddpsim.viz.figio import figure_bytes
from ddpsim.viz.ladder import plot_ladder
from ddpsim.viz.palette import bucket_color
from ddpsim.viz.scaling import plot_scaling
from ddpsim.viz.sweep import plot_sweep
from ddpsim.viz.timeline import plot_timeline

__all__ = ["bucket_color", "bucket_rows", "compare_rows", "describe_iteration", "figure_bytes", "numbering",
           "short_names", "typical_iteration", "plot_accuracy", "plot_buckets", "plot_compare", "plot_compression", "plot_dataparallel",
           "plot_ladder", "plot_scaling", "plot_sweep", "plot_timeline", "steady_iteration", "usable_runs"]
