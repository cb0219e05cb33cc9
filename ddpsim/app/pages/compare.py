"""Compare page: two or more runs (real and simulated) on one time axis, with the differences."""
import streamlit as st

from ddpsim.app import ui
from ddpsim.app.state import all_labels, get_trace, partial_note, pretty, trace_key
from ddpsim.viz import compare_rows, plot_compare

st.header("Compare runs on one time axis")
options = all_labels()
if len(options) < 2:
    st.info("Comparing needs at least two traces: upload or record another one.")
    st.stop()
current = st.session_state.get("ddpsim_source")
default = [current] if current in options else []
default += [o for o in options if o not in default][: 2 - len(default)]
chosen = st.multiselect("Runs (the first is the reference)", options, default=default, format_func=pretty,
                        key="ddpsim_compare_runs", help="Any mix of real and simulated runs.")
left, right = st.columns(2)
which = left.radio("Iteration", ["steady state", "iteration 0 (before the rebuild)", "pick a number"],
                   horizontal=True, key="ddpsim_compare_which")
number = right.number_input("Iteration number", 0, 1000, 1, key="ddpsim_compare_number",
                            disabled=which != "pick a number")
iteration = {"steady state": None, "iteration 0 (before the rebuild)": 0}.get(which, int(number))
runs = [(label, t) for label in chosen if (t := get_trace(label)) is not None]
for label, t in runs:
    if partial_note(t):
        st.info(f"{pretty(label)}: {partial_note(t)} It is left out.")
runs = [(label, t) for label, t in runs if not partial_note(t)]
if len(runs) < 1:
    st.info("Pick runs to compare.")
    st.stop()

rows = compare_rows(runs)
st.dataframe([{"run": pretty(r["run"]), "kind": r["kind"], "world size": r["world_size"],
               "buckets": r["buckets"], "iteration (ms)": round(r["iteration_ms"], 2),
               "Δ iteration (ms)": round(r["d_iteration_ms"], 2),
               "speed-up vs first": round(r["speedup"], 2) if r["speedup"] else None,
               "exposed comm (ms)": round(r["exposed_comm_ms"], 2),
               "Δ exposed (ms)": round(r["d_exposed_comm_ms"], 2),
               "overlap (%)": round(r["overlap_pct"], 1), "Δ overlap (pts)": round(r["d_overlap_pts"], 1)}
              for r in rows], hide_index=True, width="stretch")
st.caption("Steady-state medians (ddpsim.analysis.summarize); Δ is against the first run.")
key = "compare:" + "|".join(trace_key(label) for label, _ in runs) + f":{iteration}"
ui.show_figure(key, lambda: plot_compare(runs, iteration), "compare",
               alt=f"{len(runs)} runs on one time axis")
if any(t.source == "real" for _, t in runs):
    st.caption("Real runs: " + ui.learn.CPU_NOTE)
ui.explain("overlap", "bucket_size", "simulated")
