"""What-if page: change DDP's options, see the simulated timeline beside the run it came from."""
import streamlit as st

from ddpsim.app import cache, ui, whatif
from ddpsim.app.state import SIMULATED_PREFIX, add_trace, current_trace, pretty, trace_key
from ddpsim.viz import plot_compare, plot_sweep

st.header("What if? Simulate other DDP settings")
opened = current_trace()
label, trace = opened if opened else (None, None)
sources = (["the open trace"] if trace is not None else []) + ["a GPU model"]
source = st.radio("Start from", sources, horizontal=True, key="ddpsim_wi_source",
                  help="The open trace: the simulator is calibrated from it (or, for a simulated "
                       "sample, uses its GPU model). A GPU model: ResNet-50, BERT-large or GPT-2 on "
                       "datasheet GPU and network profiles.")
if source == "the open trace":
    base = whatif.base_for(trace)
    source_key = trace_key(label)
    ref_label = pretty(label)
else:
    c1, c2, c3 = st.columns(3)
    arch = c1.selectbox("Model", whatif.ARCHS, key="ddpsim_wi_arch")
    gpus = whatif.gpu_names()
    gpu = c2.selectbox("GPU", gpus, index=gpus.index("v100") if "v100" in gpus else 0, key="ddpsim_wi_gpu")
    nets = whatif.network_names()
    net = c3.selectbox("Network", nets, index=nets.index("eth25") if "eth25" in nets else 0,
                       format_func=whatif.network_label, key="ddpsim_wi_net")
    base = whatif.Base("synthetic", arch, gpu, net, None, {"world_size": 64})
    source_key, ref_label = f"synthetic:{base.hardware}:{arch}", "torch defaults"
    trace = None
k = f"ddpsim_wi:{source_key}:"  # widget keys per source, so each starts from its own base

c1, c2, c3 = st.columns(3)
base_cap = base.config.get("bucket_cap_mb")
cap = c1.select_slider("Bucket cap (MiB)", whatif.CAPS, value=base_cap if base_cap in whatif.CAPS else None,
                       format_func=lambda v: "default" if v is None else f"{v:g}", key=k + "cap",
                       help="default = torch's 25 MiB with a 1 MiB first bucket.")
order = c2.selectbox("Bucket ordering", whatif.ORDERS, key=k + "order",
                     help="torch: one bucket in iteration 0, then rebuilt in gradient-arrival order. "
                          "reverse: reverse definition order from the start. definition: definition "
                          "order (the worst: bucket 0 fills last). ready: ideal arrival order. random.")
fu = c3.toggle("find_unused_parameters", value=bool(base.config.get("find_unused_parameters")),
               key=k + "fu")
c1, c2, c3 = st.columns(3)
world = c1.select_slider("World size (ranks)", whatif.WORLD_SIZES,
                         value=min(whatif.WORLD_SIZES, key=lambda w: abs(w - int(base.config.get("world_size", 2)))),
                         key=k + "world")
n_sync = c2.select_slider("Sync every n micro-steps (no_sync)", list(range(1, 9)),
                          value=int(base.config.get("no_sync_every") or 1), key=k + "nosync")
if base.kind == "trace":
    nets = [whatif.AS_RECORDED] + whatif.network_names()
    network = c3.selectbox("Network", nets, format_func=whatif.network_label, key=k + "net")
else:
    network = base.network
    c3.markdown(f"**Network:** {whatif.network_label(network)}  \n**GPU:** {base.gpu}")

try:
    work = cache.workload(f"{source_key}:{base.hardware}", base, trace)
    cfg = whatif.sim_config(base, cap, order, fu, n_sync, world, network)
    sim, summary = cache.simulate(source_key, cache.config_key(cfg), work, cfg)
    if trace is None or source != "the open trace":
        ref_cfg = whatif.sim_config(base, world_size=world, network=network)
        trace, _ = cache.simulate(source_key, cache.config_key(ref_cfg), work, ref_cfg)
        ref_label = f"torch defaults, {world} ranks"
    ref_summary = trace.summary()
except ValueError as e:  # includes PartialTraceError and SimulationTooLarge (whatif.TIME_LIMIT_S)
    st.error(f"The simulator cannot run this configuration: {e}")
    st.stop()

ui.metric_row(summary, ref_summary, base_name=ref_label[:40])
ui.show_figure(f"wi:{source_key}:{cache.config_key(cfg)}",
               lambda: plot_compare([(ref_label, trace), ("what-if (SIMULATED)", sim)]),
               "whatif_timeline", alt="Reference run and the simulated what-if on one time axis")
if st.button("Keep this simulated run for the Compare page", key=k + "keep"):
    name = (f"{SIMULATED_PREFIX}{base.arch or pretty(label or '')} cap={cap or 'default'} {order} "
            f"fu={int(fu)} n={n_sync} w={world} {network}")
    add_trace(name, sim, select=False)
    st.toast(f"Kept as '{name}'. Open the Compare page to see it beside other runs.")
if base.kind == "trace" and trace.source == "real":
    st.caption(ui.learn.CPU_NOTE)

st.subheader("Which bucket size? A sweep")
sweep_cfg = whatif.sim_config(base, None, "torch", False, n_sync, world, network)
rows, notes = cache.sweep(source_key, cache.config_key(sweep_cfg), work, sweep_cfg)
if rows:
    best = next(r for r in rows if r["best"])
    default_rows = [r for r in rows if r["order"] == "torch" and not r["find_unused_parameters"]]
    best_cap = "None (torch's default)" if best["bucket_cap_mb"] is None else f"{best['bucket_cap_mb']:g}"
    st.success(f"Best simulated: **bucket_cap_mb={best_cap}**, ordering "
               f"{best['order']}, find_unused_parameters={best['find_unused_parameters']}: "
               f"{best['iteration_time_s'] * 1e3:.1f} ms/iteration at {world} ranks "
               f"(your choice above: {summary['iteration_time_s'] * 1e3:.1f} ms). "
               f"Across bucket sizes with torch's ordering the iteration time ranges "
               f"{min(r['iteration_time_s'] for r in default_rows) * 1e3:.1f}–"
               f"{max(r['iteration_time_s'] for r in default_rows) * 1e3:.1f} ms.")
    ui.show_figure(f"sweep:{source_key}:{cache.config_key(sweep_cfg)}",
                   lambda: plot_sweep(rows, title=f"{ref_label}: iteration time and exposed "
                                                  f"communication against bucket size ({world} ranks)"),
                   "whatif_sweep", alt="Sweep of iteration time against bucket size")
for note in notes:
    st.caption(f"Not in the sweep: {note}")
ui.explain("bucket_size", "order", "find_unused", "no_sync", "simulated")
