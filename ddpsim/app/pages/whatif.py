"""What-if page: change DDP's options, see the simulated timeline beside the run it came from."""
import streamlit as st

from ddpsim.app import beyond, cache, command, scaling, sweep_verdict, ui, whatif, whatif_words
from ddpsim.app import whatif_widgets as widgets
from ddpsim.app import network as network_plan
from ddpsim.learn import hardware, layout_sweep
from ddpsim.learn.buffers import has_buffers
from ddpsim.trace.profile_sizes import unknown_sizes
from ddpsim.app.labels import pretty
from ddpsim.app.state import MEASURED, SWEPT, current_trace, keep_trace, trace_key
from ddpsim.viz import plot_compare, plot_scaling, plot_sweep

st.header("What if? Simulate other DDP settings")
opened = current_trace()
label, trace = opened if opened else (None, None)
sources = (["the open trace"] if trace is not None else []) + ["a GPU model"]
source = st.radio("Start from", sources, horizontal=True, key="ddpsim_wi_source",
                  help="The open trace: the simulator is calibrated from it (or, for a simulated "
                       "sample, uses its GPU model). A GPU model: ResNet-50, BERT-large or GPT-2 on "
                       "datasheet GPU and network profiles.")
if source == "the open trace":
    try:
        base = whatif.base_for(trace, ui.trace_file(label))
    except ValueError as e:  # a simulated trace of a GPU model the profiles do not know (its hardware)
        st.error(f"This simulated trace's GPU model cannot be simulated here: {e}")
        st.stop()
    source_key = trace_key(label)
    ref_label = pretty(label)
else:
    c1, c2, c3 = st.columns(3)
    arch = c1.selectbox("Model", whatif.ARCHS, key="ddpsim_wi_arch")
    gpus = widgets.gpu_names()
    gpu = c2.selectbox("GPU", gpus, index=gpus.index("v100") if "v100" in gpus else 0, key="ddpsim_wi_gpu")
    nets = widgets.network_names(gpu_model=True)
    net = c3.selectbox("Network", nets, index=nets.index("eth25") if "eth25" in nets else 0,
                       format_func=lambda n: widgets.network_label(n, gpu), key="ddpsim_wi_net")
    base = whatif.Base("synthetic", arch, gpu, net, None, {"world_size": 64})
    source_key, ref_label = f"synthetic:{base.hardware}:{arch}", f"{arch} on {gpu}"
    trace = None
k = f"ddpsim_wi:{source_key}:"  # widget keys per source, so each starts from its own base
if trace is not None and not ui.has_iterations(trace):
    st.warning("The open trace recorded no iteration: nothing to calibrate the simulator from. "
               "Pick another trace, or start from a GPU model.")
    st.stop()
if trace is not None and (why := unknown_sizes(trace)) is not None and source == "the open trace":
    st.error(why)
    st.stop()
if trace is not None:
    ui.partial_note(trace)  # a run that stopped (a hang): the replay is of what was recorded
now = whatif.choices(base)  # the widgets start at the run as recorded: nothing changed
if (ran := widgets.carried_note(base)):
    st.caption(ran)

c1, c2, c3 = st.columns(3)
cap = c1.select_slider("Bucket cap (MiB)", whatif.cap_options(base), value=now["bucket_cap_mb"],
                       format_func=lambda v: "default" if v is None else f"{v:g}", key=k + "cap",
                       help="default = torch's 25 MiB with a 1 MiB first bucket.")
if (listed := widgets.cap_list_note(base)):
    c1.caption(listed)
buckets_here = c1.empty()  # filled once simulated: how many buckets this cap builds
orders = whatif.order_options(base)
order = c2.selectbox("Bucket ordering", orders, index=orders.index(now["order"]), key=k + "order",
                     format_func=lambda o: widgets.order_label(o, base),
                     help="torch: one bucket in iteration 0, then rebuilt in gradient-arrival order. "
                          "reverse: reverse definition order from the start. definition: definition "
                          "order (the worst: bucket 0 fills last). ready: ideal arrival order. random.")
hooks = widgets.hook_options(base)
hook = c2.selectbox("Communication hook", hooks, index=hooks.index(widgets.recorded_hook(base) or widgets.NO_HOOK),
                    key=k + "hook", format_func=lambda h: widgets.hook_label(h, base),
                    help="register_comm_hook: fp16/bf16 send half the bytes, PowerSGD (rank 1, from step "
                         f"{whatif.POWERSGD_START}) low-rank factors, noop nothing; round-robin:2 spreads buckets "
                         "over two process groups. Each hook's casts and matmuls cost what the recording measured in "
                         "its ranks (a GPU model: its profile's rates); noop runs the compute alone.")
hook = widgets.chosen_hook(hook)  # None: DDP's own allreduce
fu = c3.toggle("find_unused_parameters", value=now["find_unused_parameters"], key=k + "fu")
bufs = c3.toggle("forward_sync_buffers", value=now["broadcast_buffers"], key=k + "bufs",
                 help="DDP broadcasts rank 0's buffers (BatchNorm statistics) before each forward: every "
                      "rank waits for it (broadcast_buffers before torch 2.13, which deprecates that name)."
                 ) if base.kind == "trace" and has_buffers(trace) else None
small = c3.checkbox("Small bucket last", value=now["last_bucket_small"], key=k + "small",
                    help=widgets.LAST_BUCKET_SMALL_HELP)
c1, c2, c3 = st.columns(3)
world = c1.select_slider("World size (ranks)", whatif.world_options(base), value=now["world_size"], key=k + "world")
n_sync = c2.select_slider("Sync every n micro-steps (no_sync)", sorted({*range(1, 9), now["no_sync_every"]}),
                          value=now["no_sync_every"], key=k + "nosync")  # the recorded value, even beyond 8
if base.kind == "trace":
    node = hardware.node_of(trace)  # a GPU recording's node: its networks are NCCL's between such nodes
    nets = [whatif.AS_RECORDED] + widgets.network_names(gpu_model=node is not None)
    network = c3.selectbox("Network", nets, format_func=lambda n: widgets.network_label(n, node), key=k + "net")
else:
    network = base.network
    c3.markdown(widgets.gpu_model_nodes(base, world))
algo = None
if base.kind != "trace":  # a GPU model: NCCL_ALGO, among what NCCL runs at this size
    algos = widgets.nccl_algos(base, world)
    gone = widgets.algo_gone(st.session_state, k + "algo", algos)
    start = now["algo"] if now["algo"] in algos else "auto"  # a simulated trace's own NCCL_ALGO
    choice = c3.selectbox("NCCL algorithm", algos, index=algos.index(start), key=k + "algo",
                          format_func=lambda a: "auto (NCCL's choice)" if a == "auto" else a,
                          help="NCCL_ALGO: auto picks by message size, GPUs per node and node count (NCCL's tuning "
                               "model). Offered: what NCCL runs at this size on this GPU (NVLS: one node with NVLink "
                               "SHARP; NVLS-tree: several).")
    if gone:
        c3.caption(f"{gone} does not run at {beyond.ranks(world)} on {base.gpu}: back to NCCL's choice.")
    algo = None if choice == "auto" else choice

measured = st.session_state.setdefault(MEASURED, {})  # allreduces measured here, per trace
if trace is not None and source_key in measured:
    trace.meta["calibration"] = measured[source_key]
plan = network_plan.world_plan(base, trace, world, network)  # Note [Another world size on the user's path]
if plan is not None and plan.action == "refuse":
    st.error(f"{plan.short[0].upper()}{plan.short[1:]}: pick a network above.")
    st.stop()
if plan is not None and plan.action == "measure" and hook != "noop":  # noop sends no allreduce to measure
    st.info(f"Nothing was measured at {beyond.ranks(world)} yet: the allreduce cost there is the ring model fitted at "
            f"{trace.world_size} ranks. This is a CPU run recorded on this machine, so it can be measured.")
    what = network_plan.measured_at(trace, world)
    if st.button(f"Measure the allreduce at {what} (about 10-40 s)", key=k + "measure", type="primary"):
        with st.spinner(f"Measuring gloo allreduces at {what}..."):
            measured[source_key] = network_plan.measure_network(trace, world)
        st.rerun()
elif plan is not None and plan.action != "measure":
    st.caption(f"World size {world}: {plan.short or plan.message}.")
elif plan is None and (note := network_plan.recorded_size_note(trace, world, network)):
    st.caption(note)
source_key = f"{source_key}:{network_plan.calibration_key(trace)}"  # a measured network changes the workload
sim_hook = widgets.simulated_hook(hook, base)
try:
    work = cache.workload(f"{source_key}:{base.hardware}", base, trace)
    cfg = whatif.sim_config(base, cap, order, fu, n_sync, world, network,
                            work=work, trace=trace, algo=algo,
                            broadcast_buffers=bufs, comm_hook=sim_hook, last_bucket_small=small)
    out = cache.evaluate(source_key, cache.config_key(cfg), work, base, trace, cfg)
except ValueError as e:
    st.error(f"The simulator cannot run this configuration: {e}")
    st.stop()

buckets_here.caption(widgets.bucket_note(out.sim, out.unchanged))
for caution in out.cautions:
    st.warning(caution, icon=":material/warning:")
ui.metric_row(out.summary, out.unchanged_summary, base_name="unchanged (simulated)")
st.markdown(whatif_words.describe_change(out))
if (waits := whatif_words.describe_stragglers(out)):
    st.markdown(waits)
if (far := whatif_words.replay_far(out)):
    st.warning(far, icon=":material/warning:")
if (replay := whatif_words.describe_replay(out)):
    st.caption(replay)
ui.show_figure(f"wi:{source_key}:{cache.config_key(cfg)}",
               lambda: plot_compare([("unchanged", out.unchanged), ("what-if", out.sim)]),  # compare.py marks each SIMULATED
               "whatif_timeline", alt="The unchanged configuration and the what-if, both simulated, on one time axis")
st.caption("The figure draws rank 0's most typical iteration of each run (closest to its medians), with that "
           "iteration's own time in its header; the figures above are medians over the steady iterations, and "
           "their exposed communication is the most any simulated rank waits, so the two can differ: one rank's "
           "typical iteration, against the rank that waits most.")
if st.button("Keep this simulated run for the Compare page", key=k + "keep"):
    who = f"{base.arch} on {base.gpu}" if base.kind == "synthetic" else pretty(label or "")
    name = widgets.kept_name(who, now, widgets.recorded_hook(base), cap, order, fu, n_sync, world, network,
                             hook, bufs, algo, small)
    name = keep_trace(name, out.sim, f"{source_key}:{cache.config_key(cfg)}")
    twin = name if cache.config_key(cfg) == cache.config_key(out.unchanged_cfg) else keep_trace(
        widgets.unchanged_name(who, out.replay_summary is not None), out.unchanged,
        f"{source_key}:{cache.config_key(out.unchanged_cfg)}")
    st.session_state["ddpsim_last_kept"] = name  # the Compare page opens with it, its unchanged twin first,
    st.session_state["ddpsim_last_kept_with"] = (twin, label if base.kind == "trace" else None)  # and the trace
    st.toast(f"Kept as '{name}'. Open the Compare page to see it beside other runs.")
if base.kind == "trace" and ui.ran_on_cpu(trace):
    st.caption(ui.learn.WHATIF_CPU_NOTE)
with st.expander("The same on the command line", key=k + "cli"):  # a key: it stays open as boxes come and go above
    st.code(command.simulate_command(base, ui.trace_file(label) if label else None, cap, order, fu, n_sync, world,
                                     network, sim_hook, bufs, algo, trace, small), language="bash")
    st.caption("It prints this what-if's iteration time and exposed communication" +
               (" (the trace: the sidebar's \"Trace (ddpsim JSON)\" download)." if base.kind == "trace" or base.model else "."))

st.subheader("Which bucket size? A sweep")
needs_fu = whatif.sweep_needs_fu(base, trace)  # a recording that marked a parameter unused: find_unused stays on
sweep_cfg = whatif.sim_config(base, None, "torch", bool(needs_fu), n_sync, world, network,  # the hook and buffers chosen above;
                              trace_ranks=whatif.SWEEP_RANKS, work=work, trace=trace, algo=algo,  # small-last: swept
                              broadcast_buffers=bufs, comm_hook=sim_hook)
sweep_key = f"{source_key}:{cache.config_key(sweep_cfg)}"  # the sweep's cache key (a JSON of the config: once)
swept = st.session_state.setdefault(SWEPT, set())  # sweeps run this session: shown at once again
sweep_s = cache.sweep_seconds(source_key, sweep_key, work, sweep_cfg, needs_fu)  # one of its simulations, timed
if ui.quick_or_asked(sweep_key, swept, sweep_s, widgets.SWEEP_ASK_S, "Run the sweep", k + "sweep",
                     f"The sweep simulates {whatif.SWEEP_RUNS} configurations like the one above"):
    rows, notes = cache.sweep(source_key, sweep_key, work, sweep_cfg, needs_fu)
    if (verdict := sweep_verdict.describe_sweep(rows, out.summary, world, out.noise,  # PowerSGD on gloo: a caution
                                                 whatif.backend(base, trace, network), hook)):
        st.success(verdict)
        if base.kind == "trace" and network_plan.as_recorded(network) and (best := layout_sweep.recommend(rows)):
            if (far := layout_sweep.beyond_fitted_sizes(best["bucket_cap_mb"], work, trace)):
                st.warning(far, icon=":material/warning:")
        ui.show_figure(f"sweep:{sweep_key}",
                       lambda: plot_sweep(rows, title=f"{ref_label[:48]}: against bucket size "
                                                      f"({beyond.ranks(world)}, SIMULATED)"),
                       "whatif_sweep", alt="Sweep of iteration time against bucket size")
        if world > whatif.SWEEP_RANKS:
            st.caption(f"Each of the sweep's {len(rows)} rows keeps {whatif.SWEEP_RANKS} of the ranks, to stay fast: "
                       "its exposed communication, the most any kept rank waits, can sit below that of the figure "
                       f"above, which keeps {min(world, cfg.trace_ranks)}.")
    for note in notes:
        st.caption(f"Not in the sweep: {note}")
st.subheader("How does it scale? The same options at every world size")
chosen = dict(bucket_cap_mb=cap, order=order, find_unused_parameters=fu, no_sync_every=n_sync, network=network,
              algo=algo, broadcast_buffers=bufs, comm_hook=sim_hook, last_bucket_small=small)
scale_key = f"{source_key}:scaling:{sorted(chosen.items())}"  # not the world size: it only moves the outline
if ui.quick_or_asked(scale_key, swept, scaling.seconds(out.summary, base, trace, work, chosen), widgets.SWEEP_ASK_S,
                     "Simulate every world size", k + "scaling", "The curve simulates these options at each world size"):
    rows, notes = cache.scaling_rows(source_key, scale_key, work, base, trace, chosen)
    if len(rows) >= 2:
        ui.show_figure(f"scale:{scale_key}:{world}",
                       lambda: plot_scaling(rows, world, title=f"{ref_label[:48]}: by world size (SIMULATED)"),
                       "whatif_scaling", alt="Iteration time by world size: compute, exposed communication, waiting")
        st.caption(scaling.describe(rows, world, trace.world_size if base.kind == "trace" else None))
        with st.expander("The curve on the command line", key=k + "scaling_cli"):
            st.code(command.simulate_command(base, ui.trace_file(label) if label else None, cap, order, fu, n_sync, world,
                                             network, sim_hook, bufs, algo, trace, small,
                                             sizes=[r["world_size"] for r in rows]), language="bash")
            st.caption("It prints these rows: each world size's iteration, compute, exposed communication, waiting "
                       "and efficiency.")
    for note in notes:
        st.caption(f"Not in the curve: {note}.")
ui.explain("bucket_size", "order", "find_unused", "no_sync", "scaling", "simulated")
