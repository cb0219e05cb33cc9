"""Record page: start a real recording (a process group, never a shell), watch it, view it."""
import streamlit as st

from ddpsim.app import jobs, ui
from ddpsim.app import whatif_widgets as widgets
from ddpsim.app.state import get_trace, open_partial, open_recording
from ddpsim.app.whatif import POWERSGD_START  # PowerSGD from step 2, as the What-if page prices it
from ddpsim.cli.headline import headline_lines  # the line `ddpsim record` prints: the same figures here
from ddpsim.models import ZOO_NAMES as MODELS  # torch-free: the app never imports torch
from ddpsim.record.config import RecordConfig  # its default iterations, the command line's (torch-free too)
from ddpsim.trace import TraceFormatError, load_trace
from ddpsim.viz import plot_timeline

IMPLS = ("torch", "minddp", "overlap", "naive")  # ddpsim.record.config.IMPLS, in the order shown
st.header("Record a real DDP run")
st.caption("Runs N processes with gloo on this machine (each rank pinned to a CPU), records every "
           "gradient-ready event, bucket and allreduce, and opens the trace. " + ui.learn.CPU_NOTE)

with st.form("ddpsim_record_form"):
    c1, c2, c3 = st.columns(3)
    model = c1.selectbox("Model", MODELS, key="ddpsim_rec_model",
                         help="branchy has a branch that is not used every iteration: it needs "
                              "find_unused_parameters.")
    world = c2.slider("World size (processes)", 1, 4, 2, key="ddpsim_rec_world")
    iters = c3.slider("Iterations", 2, 20, RecordConfig.iters, key="ddpsim_rec_iters",
                      help="The first iteration builds the buckets; the What-if page learns from the steady "
                           "ones after it, so more iterations give it more to learn from (docs/accuracy.md "
                           "replays runs of 20).")
    c1, c2, c3 = st.columns(3)
    impl = c1.selectbox("Implementation", IMPLS, key="ddpsim_rec_impl",
                        format_func={"torch": "torch DDP", "minddp": "ddpsim's readable DDP (minddp)",
                                     "overlap": "overlap (one allreduce per parameter, from its hook)",
                                     "naive": "naive (one allreduce per parameter, after backward)"}.get)
    cap = c2.select_slider("Bucket cap (MiB)", [None, 0.1, 0.25, 0.5, 1.0, 5.0, 25.0, 100.0],
                           format_func=lambda v: "default" if v is None else f"{v:g}", key="ddpsim_rec_cap")
    fu = c3.checkbox("find_unused_parameters", key="ddpsim_rec_fu")
    hook = st.columns(3)[0].selectbox(
        "Communication hook", widgets.hook_options(), key="ddpsim_rec_hook", format_func=widgets.hook_label,
        help="register_comm_hook with torch's own hook (record --comm-hook); PowerSGD from step "
             f"{POWERSGD_START} (rank 1). torch's PowerSGD aborts gloo runs with several buckets: "
             "ddpsim refuses those in one line.")
    hook = widgets.chosen_hook(hook)  # None: DDP's own allreduce
    started = st.form_submit_button("Start recording", type="primary", icon=":material/play_arrow:")

if started and hook and impl != "torch":  # record refuses it too, in its flags' words
    st.error("A communication hook is registered on torch's DDP (register_comm_hook): choose 'torch DDP' as the "
             "Implementation, or no hook.")
elif started and "ddpsim_job" not in st.session_state:
    cfg = {"model": model, "world_size": world, "iters": iters, "impl": impl, "bucket_cap_mb": cap,
           "find_unused_parameters": fu, "timeout_s": 30.0, "comm_hook": hook,
           **({"powersgd_start_iter": POWERSGD_START} if hook == "powersgd" else {})}
    name = (f"{model}_{impl}_w{world}" + (f"_cap{cap:g}" if cap else "") + ("_fu" if fu else "")
            + (f"_{hook.replace(':', '')}" if hook else ""))
    st.session_state["ddpsim_job"] = jobs.start(cfg, name)
    st.session_state.pop("ddpsim_rec_result", None)

job = st.session_state.get("ddpsim_job")
if job is not None:
    now = jobs.poll(job)  # where it is: a rerun (the Stop button's, say) showed "Starting the ranks" again
    done, total = now.get("done", 0), max(1, now.get("total") or job.cfg["iters"])
    bar = st.progress(min(done / total, 1.0), text=jobs.progress_text(done, total, now.get("stage", jobs.STARTING)))
    stop = st.empty()  # emptied once the job has ended: a dead Stop button stayed under a failed recording
    if stop.button("Stop the recording", key="ddpsim_rec_stop"):
        bar.progress(min(done / total, 1.0), text="Stopping: ending every rank and keeping what they recorded...")
        jobs.stop(job)
    # the page waits here; a rerun elsewhere leaves the job running in the background
    status = jobs.wait(job, lambda done, total, stage: bar.progress(min(done / total, 1.0),
                                                                   text=jobs.progress_text(done, total, stage)))
    total = max(1, status.get("total") or job.cfg["iters"])
    del st.session_state["ddpsim_job"]
    stop.empty()
    if status["state"] == "done":
        bar.progress(1.0, text=f"Done: {total}/{total} iterations")
        try:
            trace = load_trace(job.out)
        except TraceFormatError as e:
            st.session_state["ddpsim_rec_result"] = ("failed", str(e), None)
        else:
            label = open_recording(job.out, trace)
            st.session_state["ddpsim_rec_result"] = ("done", label)
            st.rerun()  # so the sidebar shows the new trace as the open one
    else:
        bar.empty()
        partial = open_partial(job.out)  # what the ranks recorded before it ended, if anything: nothing is lost
        st.session_state["ddpsim_rec_result"] = (
            ("stopped", status.get("done", 0), total, partial) if status["state"] == "stopped"
            else ("failed", status.get("error") or "the recording failed", partial))
        if partial:
            st.rerun()  # so the sidebar shows the partial trace as the open one

result = st.session_state.get("ddpsim_rec_result")
if result and result[0] == "failed":
    st.error(f"The recording failed: {result[1]}", icon=":material/error:")
    st.caption("Nothing is left running: the launcher stops every rank when one fails."
               + (f" What was recorded before it is now the open trace, '{result[2]}' (marked incomplete)."
                  if result[2] else ""))
elif result and result[0] == "stopped":  # the user's Stop: not a failure
    _, done, total, partial = result
    kept = get_trace(partial, quiet=True) if partial else None
    st.info(f"Stopped at {done}/{jobs.iterations(total)}, as asked. " + (
        f"What the ranks recorded ({jobs.iterations(len(kept.longest_rank.iterations))}) is now the open trace, '{partial}' "
        "(marked incomplete): see it on every page." if kept else "No iteration was recorded, so nothing was kept.")
        + " No rank is left running.", icon=":material/stop_circle:")
elif result and result[0] == "done":
    label = result[1]
    trace = get_trace(label, quiet=True)  # this session's, or found in the runs folder while the page was away
    if trace is not None:
        st.success(f"Done: '{label}' is now the open trace: see it on every page.")
        st.markdown("  \n".join(headline_lines(trace, "**Recorded**, medians over the steady iterations "
                                                       "(as `ddpsim record` prints them)")))
        last = max(it.iteration for it in trace.longest_rank.iterations)
        it = 1 if last >= 1 else 0
        ui.show_figure(f"rec:{label}:{id(trace)}:{it}", lambda: plot_timeline(trace, it),
                       f"timeline_{label}_it{it}", alt=f"Timeline of iteration {it} of the new recording")
ui.explain("find_unused", "cpu")
