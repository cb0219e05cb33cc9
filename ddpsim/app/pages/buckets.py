"""Buckets page: which parameter is in which bucket, bytes per bucket, launch order, the rebuild."""
import streamlit as st

from ddpsim.app import ui
from ddpsim.app.state import require_trace, trace_key
from ddpsim.viz import bucket_rows, plot_buckets

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
st.caption("Left: each dot is a parameter; it arrives (x) in the reverse of its definition order (y). "
           "Right: each bar is a bucket, top = allreduced first, made of its parameters' gradients "
           "(MiB); the dashed line is the cap the bucket was built under.")
with st.expander("Which parameter is in which bucket (table)"):
    st.dataframe(bucket_rows(trace, rank), hide_index=True, width="stretch")
ui.explain("reverse", "buckets", "order", "rebuild", "static_graph", expanded=True)
