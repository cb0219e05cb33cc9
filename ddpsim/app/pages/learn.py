"""Learn page: the ideas behind every view, in plain words, with their sources."""
import streamlit as st

from ddpsim.app import learn, ui

st.header("Learn: how DDP overlaps gradient communication with backward")
st.markdown(
    "DistributedDataParallel (DDP) trains one copy of the model per process and keeps the copies "
    "identical by **averaging the gradients of every parameter across processes** (an *allreduce*) "
    "in each iteration. The pages of this app show, on real and simulated runs, how it does that "
    "without waiting for the end of backward. Each section says where to see it.")
WHERE = {"reverse": "Buckets page (left panel); Timeline ticks",
         "buckets": "Buckets page; Timeline (coloured bars)",
         "order": "Timeline (dashed tails after triangles); What-if with ordering = definition",
         "rebuild": "Timeline, iteration 0 vs 1; Buckets page (construction vs rebuilt)",
         "overlap": "Timeline (hatching); Compare", "find_unused": "sample 04_branchy; Record page",
         "static_graph": "Buckets page (the rebuilt layout's first iteration); Timeline, iteration 0",
         "buffers": "Timeline of sample 05_convnet_torch_no_sync3; What-if (broadcast_buffers)",
         "join": "this section (SIMULATED); Timeline of a run recorded with --uneven K --join",
         "no_sync": "sample 05_convnet_torch_no_sync3; What-if (sync every n)",
         "bucket_size": "What-if sweep; the SIMULATED samples",
         "scaling": "What-if, 'How does it scale?' (SIMULATED); notebook 05",
         "dataparallel": "this section (SIMULATED); notebook 01, section 'Why DDP and not DataParallel'",
         "cpu": "the real samples; Compare",
         "simulated": "What-if; the SIMULATED samples"}
for name in learn.ORDER:
    topic = learn.TOPICS[name]
    st.subheader(topic.title)
    st.markdown(topic.text)
    if name == "dataparallel":
        left, middle, right = st.columns(3)
        model = left.selectbox("Model (zoo)", learn.DATAPARALLEL_MODELS, key="dp_model")
        kind = middle.selectbox("Each device", list(learn.DATAPARALLEL_DEVICES), key="dp_kind")
        n = right.slider("Devices", 2, 8, 4, key="dp_devices")
        gpu = learn.DATAPARALLEL_DEVICES[kind]
        with st.spinner("Measuring the pieces with torch, then simulating both iterations..."):
            comparison = learn.dataparallel(model, n, gpu)
        caption = learn.dataparallel_caption(comparison)
        ui.show_figure(f"learn:dataparallel:{model}:{gpu}:{n}", lambda c=comparison: learn.dataparallel_figure(c),
                       f"dataparallel_{model}_{gpu or 'cpu'}_{n}", alt=caption)
        st.caption(caption)
    if name in learn.FIGURES:
        sample, _, _, caption = learn.FIGURES[name]
        ui.show_figure(f"learn:{name}", lambda n=name: learn.figure(n),
                       f"learn_{name}", alt=caption)
        st.caption(caption)
    st.caption(f"Where to see it: {WHERE[name]}")
st.divider()
st.markdown(f"**Sources.** {learn.PAPER}. {learn.NOTE[0].upper() + learn.NOTE[1:]}. PyTorch source: "
            f"{learn.REDUCER} (bucket assignment, hooks, launch order, rebuild, unused parameters), "
            "`torch/nn/parallel/distributed.py` (`no_sync`, `_sync_buffers`), "
            "`torch/nn/parallel/data_parallel.py` (`scatter`, `replicate`, `parallel_apply`, `gather`). "
            "Facts about torch 2.13 were checked by "
            "running it; how close the simulator comes to real runs is in `docs/accuracy.md`.")
