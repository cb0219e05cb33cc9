"""Buckets page: which parameter is in which bucket, bytes per bucket, launch order, the rebuild."""
import streamlit as st

from ddpsim.app import ui
from ddpsim.app.state import require_trace, trace_key
from ddpsim.viz import bucket_rows, numbering, plot_buckets

st.header("Buckets: which gradient goes where, and in what order")
label, trace = require_trace(iterations=False)

ranks = [r.rank for r in trace.ranks]
rank = st.selectbox("Rank", ranks, key=f"ddpsim_bucket_rank:{label}",
                    help="After the rebuild every rank uses rank 0's layout.") if len(ranks) > 1 else ranks[0]
lays = next(r for r in trace.ranks if r.rank == rank).layouts
st.markdown(" → ".join(f"**{lay.kind}** layout from iteration {lay.from_iteration}: {len(lay.buckets)} "
                       f"bucket{'s' if len(lay.buckets) != 1 else ''}" for lay in lays) or "No bucket layout.")
ui.show_figure(f"buckets:{trace_key(label)}:{rank}", lambda: plot_buckets(trace, rank),
               f"buckets_{label}_rank{rank}", alt="Gradient arrival order and bucket layouts")
LEFT = {"definition": "each dot is a parameter; it arrives (x) in the reverse of its definition order (y).",
        "arrival": "each dot is a parameter. A profile holds shapes, not names, so the import numbered the "
                   "parameters by arrival (the k-th gradient ready in the first step is parameter n-1-k): the "
                   "falling line is so by construction, not the model's definition order.",
        "model": "each dot is a parameter. The import gave the profile's gradients, in the order they became "
                 "ready, the model's indices in the model's own ready order (read on the meta device, "
                 "`import --model`): the line is that order, not one measured in the profile."}
st.caption(f"Left: {LEFT[numbering(trace)]} "
           "Right: each bar is a bucket, top = allreduced first, made of its parameters' gradients "
           "(MiB); the dashed line is the cap the bucket was built under.")
with st.expander("Which parameter is in which bucket (table)"):
    st.dataframe(bucket_rows(trace, rank), hide_index=True, width="stretch")
ui.explain("reverse", "buckets", "order", "rebuild", "static_graph", expanded=True)
