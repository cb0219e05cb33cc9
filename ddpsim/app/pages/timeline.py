"""Timeline page: one iteration of the open trace, rank by rank."""
import streamlit as st

from ddpsim.analysis import cycle_metrics
from ddpsim.app.state import current_trace
from ddpsim.viz import plot_timeline

st.header("Timeline: what DDP did in one iteration")
opened = current_trace()
if opened is None:
    st.info("Choose a bundled sample or upload a trace in the sidebar.")
    st.stop()
label, trace = opened

iterations = sorted({it.iteration for r in trace.ranks for it in r.iterations})
all_ranks = [r.rank for r in trace.ranks]
left, right = st.columns([3, 1])
with left:
    if len(iterations) > 1:
        iteration = st.select_slider("Iteration", iterations, key=f"ddpsim_iteration:{label}",
                                     help="Iteration 0 reduces one big bucket after the whole "
                                          "backward; from iteration 1 the rebuilt buckets overlap it.")
    else:
        iteration = iterations[0]
with right:
    ranks = st.multiselect("Ranks", all_ranks, default=all_ranks[:4], key=f"ddpsim_ranks:{label}")

# The numbers: steady state (trace.summary) and the chosen iteration alone.
try:
    steady = trace.summary()
except ValueError as e:
    steady = None
    st.warning(f"No steady-state summary: {e}")
this = cycle_metrics(trace, [iteration])
synced = any(it.sync for r in trace.ranks for it in r.iterations if it.iteration == iteration)
cols = st.columns(3)
for col, key, name, fmt, scale in (
        (cols[0], "iteration_time_s", "Iteration time", "{:.1f} ms", 1e3),
        (cols[1], "exposed_comm_s", "Exposed communication", "{:.1f} ms", 1e3),
        (cols[2], "overlap_fraction", "Comm. overlapped with backward", "{:.0%}", 1)):
    value = this[key] * scale if (synced or key == "iteration_time_s") else None
    base = steady[key] * scale if steady else None
    col.metric(
        f"{name}, iteration {iteration}", "no allreduce" if value is None else fmt.format(value),
        delta=None if value is None or base is None else fmt.format(value - base).replace("%", " pts"),
        delta_color="normal" if key == "overlap_fraction" else "inverse",
        delta_description="vs steady state",
        help=None if base is None else f"Steady state (median over iterations "
             f"{steady['steady_iterations'][0]}..{steady['steady_iterations'][-1]}): {fmt.format(base)}")

if ranks:
    st.pyplot(plot_timeline(trace, iteration, ranks=ranks),
              alt=f"Timeline of iteration {iteration} for ranks {ranks}")
else:
    st.info("Pick at least one rank.")
st.caption("Grey bars are compute; coloured ticks mark gradients becoming ready, in their bucket's "
           "colour; triangles mark a full bucket; coloured bars are allreduces, from launch to "
           "completion. Hatching is exposed communication: the time after the last gradient is "
           "ready that backward still waits for allreduces.")
