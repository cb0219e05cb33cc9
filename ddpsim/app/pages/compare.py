"""Compare page: two or more runs (real and simulated) on one time axis, with the differences."""
import streamlit as st

from ddpsim.app import ui, units
from ddpsim.app.labels import pretty
from ddpsim.app.state import SIMULATED_PREFIX, all_labels, get_trace, trace_key
from ddpsim.experiments import ladder
from ddpsim.viz import compare_rows, plot_compare, plot_ladder, short_names, usable_runs

st.header("Compare runs on one time axis")
options = all_labels()
if len(options) < 2:
    st.info("Comparing needs at least two traces: upload or record another one.")
    st.stop()
current = st.session_state.get("ddpsim_source")
default = [current] if current in options else []
kept = st.session_state.get("ddpsim_last_kept")  # the run just kept on the What-if page, if any
twin, source = st.session_state.get("ddpsim_last_kept_with", (None, None))  # its unchanged configuration, its trace
if kept in options and twin in options and twin != kept:  # Δ against the What-if page's reference; the recording
    default = list(dict.fromkeys([twin, kept] + ([source] if source in options else [])))
default += [kept] if kept in options and kept not in default else []
default += [o for o in options if o not in default][: max(0, 2 - len(default))]
chosen = st.multiselect("Runs (the first is the reference)", options, default=default, format_func=pretty,
                        key="ddpsim_compare_runs", help="Any mix of real and simulated runs.")
traces = [(label, t) for label in chosen if (t := get_trace(label)) is not None]
last = max((it.iteration for _, t in traces for r in t.ranks for it in r.iterations), default=0)
left, right = st.columns(2)
which = left.radio("Iteration", ["most typical", "iteration 0 (before the rebuild)", "pick a number"],
                   horizontal=True, key="ddpsim_compare_which",
                   help="Most typical: for each run, the steady-state iteration closest to its medians "
                        "(the numbers in the table).")
number = right.number_input("Iteration number", 0, last, min(1, last), key="ddpsim_compare_number",
                            disabled=which != "pick a number",
                            help=f"0 to {last}, the last iteration recorded; a run without the one picked "
                                 "shows its most typical iteration, named in its header.")
iteration = {"most typical": None, "iteration 0 (before the rebuild)": 0}.get(which, int(number))
runs, skipped = usable_runs(traces)
for label in skipped:
    st.warning(f"{pretty(label)} has no complete synced iteration to compare (a partial run): left out.")
if len(runs) < 1:
    st.info("Pick runs to compare.")
    st.stop()
if len(runs) == 1:  # the table and figure of one run alone; the ladder needs two runs or more
    st.info(f"Only {pretty(runs[0][0])} to show: pick a second run above to compare it with.")

def _one_place(value):
    return None if value is None else round(value, 1)  # None: no collective communicated (shown empty)


def _varies(row) -> str:
    """How much a run's single iterations vary; a simulated run whose steps repeat has no noise to show."""
    if row["kind"] == "simulated" and row["spread_pct"] < 0.05:
        return f"{pretty(row['run'])} not at all (simulated: its {row['n_iterations']} steady iterations repeat)"
    return f"{pretty(row['run'])} ±{row['spread_pct']:.0f}% over {row['n_iterations']} iterations"


rows = compare_rows(runs)
NAME_CHARS = 48  # a run's name in the table: its start and its end (a kept what-if's settings) around "…"
# a simulated run's name without "simulated: " (its kind column says so): room for what tells two such runs apart
names = short_names([pretty(r["run"]).removeprefix(SIMULATED_PREFIX) if r["kind"] == "simulated" else pretty(r["run"])
                     for r in rows], NAME_CHARS)
# milliseconds as the Timeline and What-if pages show them (units.ms_digits): an iteration with one decimal,
# exposed communication with two where a run's is under a millisecond
it, ex = units.ms_digits(), units.ms_digits(*(r["exposed_comm_ms"] / 1e3 for r in rows))
MS_COLUMNS = {"iteration (ms, median)": it, "Δ iteration (ms)": it, "exposed comm (ms, median)": ex, "Δ exposed (ms)": ex}
st.dataframe([{"run": name,  # what people compare first, then how each run was set up
               "iteration (ms, median)": round(r["iteration_ms"], it), "Δ iteration (ms)": round(r["d_iteration_ms"], it),
               "exposed comm (ms, median)": round(r["exposed_comm_ms"], ex),
               "Δ exposed (ms)": round(r["d_exposed_comm_ms"], ex),
               "overlap (%)": _one_place(r["overlap_pct"]), "Δ overlap (pts)": _one_place(r["d_overlap_pts"]),
               "speed-up vs first": round(r["speedup"], 2) if r["speedup"] else None,
               "kind": r["kind"], "comm hook": r["comm_hook"], "world size": r["world_size"],
               "buckets": r["buckets"], "sent per step (MB)": round(r["sent_bytes"] / 1e6, 3),
               "iteration range (ms)": f"{r['iteration_min_ms']:.{it}f}–{r['iteration_max_ms']:.{it}f}",
               "exposed range (ms)": f"{r['exposed_min_ms']:.{ex}f}–{r['exposed_max_ms']:.{ex}f}"}
              for name, r in zip(names, rows)], hide_index=True, width="stretch",
             column_config={"run": st.column_config.TextColumn(width="large", pinned=True),  # its 48 characters
                            **{c: st.column_config.NumberColumn(format=f"%.{d}f") for c, d in MS_COLUMNS.items()},
                            "speed-up vs first": st.column_config.NumberColumn(
                                help="The first run's time per iteration over this run's. At another world size "
                                     "an iteration processes another number of samples: compare throughput then.")})
st.caption("Medians over each run's steady-state iterations (after the rebuild); Δ is against the first "
           "run. **Comm hook**: what each run registered with `register_comm_hook` (none: DDP's own fp32 "
           "allreduce); **sent per step**: the bytes its gradient collectives sent in a synced step (rank 0); "
           "an empty **overlap**: no collective communicated (the noop hook, or one rank), so there was nothing "
           "to overlap. "
           "**Single iterations vary**: " + ", ".join(_varies(r) for r in rows)
           + ". A Δ smaller than the ranges is within run-to-run noise. The figure draws one iteration "
           "per run (the most typical: closest to its medians) with its own time in its header, so it "
           "can differ from the table by up to those ranges.")
key = "compare:" + "|".join(trace_key(label) for label, _ in runs) + f":{iteration}"
ui.show_figure(key, lambda: plot_compare(runs, iteration), "compare",
               alt=f"{len(runs)} runs on one time axis")
if len(runs) > 1:  # one run is no ladder
    with st.expander("The ladder: naive → overlap → bucketed → torch's DDP"):
        ladder_rows = ladder.rows_for_runs(runs)
        if len({r["rung"] for r in ladder_rows}) < 2:
            st.info("Pick runs of at least two rungs: record `naive`, `overlap`, `minddp` with a fixed "
                    "order, and `torch` on the Record page, or run `python -m ddpsim ladder`, which "
                    "records all four side by side and simulates them.")
        else:
            ui.show_figure("ladder:" + key, lambda: plot_ladder(ladder_rows), "ladder",
                           alt=f"iteration time and exposed communication of {len(ladder_rows)} rungs")
if any(ui.ran_on_cpu(t) for _, t in runs):
    st.caption("Real runs: " + ui.learn.CPU_NOTE)
ui.explain("overlap", "bucket_size", "simulated")
