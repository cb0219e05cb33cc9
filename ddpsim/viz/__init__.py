"""Figures: matplotlib drawings of traces and analysis tables (no Streamlit here).

Every function returns a ``matplotlib.figure.Figure`` built without pyplot, so
figures never leak into global state; show one with ``st.pyplot(fig)`` in the
app, or ``fig.savefig(...)`` anywhere else.

Bucket ``i`` has the colour ``bucket_color(i)`` in every view.
"""
from ddpsim.viz.palette import bucket_color
from ddpsim.viz.timeline import describe_iteration, plot_timeline

__all__ = ["bucket_color", "describe_iteration", "plot_timeline"]
