"""Timeline page: one iteration of the open trace, rank by rank."""
import streamlit as st

from ddpsim.analysis import iteration_report, steady_summary
from ddpsim.analysis.shared_cores import shared_cores_line
from ddpsim.app import timeline_notes as notes, ui, units
from ddpsim.app.state import require_trace, trace_key
from ddpsim.viz import typical_iteration, plot_timeline

st.header("Timeline: what DDP did in one iteration")
label, trace = require_trace()

iterations = sorted({it.iteration for r in trace.ranks for it in r.iterations})
steady = steady_summary(trace)
opening = typical_iteration(trace) if steady else iterations[-1]  # a typical iteration, not iteration 0
all_ranks = [r.rank for r in trace.ranks]
left, right = st.columns([3, 1])
with left:
    if len(iterations) > 1:
        iteration = st.select_slider("Iteration", iterations, value=opening, key=f"ddpsim_iteration:{label}",
                                     help="Opens on a steady-state iteration. Iteration 0 reduces one "
                                          "big bucket after the whole backward; from iteration 1 the "
                                          "rebuilt buckets overlap it.")
    else:
        iteration = iterations[0]
with right:
    ranks = st.multiselect("Ranks", all_ranks, default=all_ranks[:4], key=f"ddpsim_ranks:{label}")

# The numbers: the chosen iteration alone, beside the steady state of its like (Note [One micro-step beside its like]).
report = iteration_report(trace, iteration)
ref = notes.reference(trace, iteration, steady)
talked = {"this": notes.communicates(trace, iteration), "steady": bool(ref and ref["communicates"])}
cols = st.columns(3)
for col, key, name, fmt, scale in (
        (cols[0], "iteration_time_s", "Iteration time", "{:.1f} ms", 1e3),
        (cols[1], "exposed_comm_s", "Exposed communication",  # this step's and the steady one's, alike
         units.ms_format(report["metrics"]["exposed_comm_s"], ref and ref["exposed_comm_s"]), 1e3),
        (cols[2], "overlap_fraction", "Comm. overlapped with compute", "{:.0%}", 1)):
    value = report["metrics"][key] * scale if report["metrics"][key] is not None else None
    base = ref[key] * scale if ref and ref[key] is not None and (key != "overlap_fraction" or talked["steady"]) else None
    if key == "overlap_fraction" and value is not None and not talked["this"]:  # 0% of nothing
        col.metric(f"{name}, iteration {iteration}", "none", help=notes.NO_OVERLAP)
        continue
    delta, zero = (None, False) if value is None or base is None else ui.delta_text(fmt, value - base)
    col.metric(
        f"{name}, iteration {iteration}", "no allreduce" if value is None else fmt.format(value), delta=delta,
        delta_color="off", delta_arrow="off" if zero else "auto",
        delta_description=notes.versus(ref),
        help=None if base is None else notes.steady_help(ref, key, fmt, scale))

if (gap := report["enqueue_gap"]):  # GPU traces: the CPU's time for each gradient beside the GPU's
    st.info(notes.gpu_clock_note(trace, gap, report["metrics"]["iteration_time_s"]))
if (said := notes.import_notes(trace)):  # what the profile could not say (docs/trace-format.md)
    st.info(said, icon=":material/input:")
if (joined := notes.join_note(trace, iteration)):  # uneven inputs: the ranks out of data shadow the others
    st.info(joined, icon=":material/call_merge:")
if (shared := shared_cores_line(trace)):  # a CPU recording with more ranks than cores: the times hold the turns
    st.caption(f"{shared[0].upper()}{shared[1:]}.")
if (logged := notes.torch_logger(trace, iteration)):  # torch's own timing of this iteration
    st.caption(logged)

# Zoom: a window in ms since the iteration start.
span_ms = report["span_ms"]
window = st.slider("Zoom (ms since the iteration start)", 0.0, span_ms, (0.0, span_ms), step=0.1,
                   key=f"ddpsim_zoom:{label}:{iteration}",
                   help="Drag either end to zoom into part of the iteration.")
window = None if window == (0.0, span_ms) else window

if ranks:
    ui.show_figure(f"timeline:{trace_key(label)}:{iteration}:{ranks}:{window}",
                   lambda: plot_timeline(trace, iteration, ranks=ranks, window=window),
                   f"timeline_{label}_it{iteration}", alt=f"Timeline of iteration {iteration} for ranks {ranks}")
else:
    st.info("Pick at least one rank.")
st.caption("Grey bars are forward and backward as each rank timed them; coloured ticks mark gradients "
           "becoming ready, in their bucket's colour; triangles mark a full bucket; coloured bars are "
           "allreduces, from launch to completion. Hatching is exposed communication: the time after the last "
           "gradient is ready that backward still waits for allreduces. It lies inside the grey backward bar: "
           "DDP's finalize_backward waits for every bucket's allreduce before the backward ends, so that "
           "stretch is waiting, not compute."
           + (" The band inside an imported profile's compute bars is its GPU's compute kernels, dark where "
              "they ran and light where the GPU sat idle: the overlap counts only the dark part."
              if any(it.compute_busy is not None for r in trace.ranks for it in r.iterations) else ""))
ui.explain("reverse", "order", "rebuild", "overlap", "find_unused", "static_graph", "buffers", "no_sync")
