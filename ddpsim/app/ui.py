"""Streamlit helpers shared by the pages: cached figures with downloads, explanations.

``show_figure(key, build, name)`` renders ``build()`` (a ddpsim.viz call) to PNG once
per ``key`` (st.cache_data), shows it, and offers PNG and SVG downloads; the SVG is
made only when clicked. Keys must name everything the figure depends on.
"""
from __future__ import annotations

import json
import re
from typing import Callable

import streamlit as st
from matplotlib.figure import Figure

from ddpsim.app import learn, units
from ddpsim.analysis.period import ITERATION_TIME
from ddpsim.errors import first_line
from ddpsim.trace.export import to_chrome
from ddpsim.trace import Trace
from ddpsim.trace.profile_sizes import unknown_sizes
from ddpsim.viz import figure_bytes

DPI = 100


@st.cache_data(max_entries=64, show_spinner=False)
def _png(key: str, _build: Callable[[], Figure]) -> bytes:
    return figure_bytes(_build(), "png", dpi=DPI)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_")[:80] or "figure"


def trace_file(label: str) -> str:
    """The file name the sidebar's "Trace (ddpsim JSON)" download gives the trace ``label`` (and the
    What-if page's command reads): an upload's own ``.json`` or ``.json.gz`` is not doubled."""
    return f"{slug(re.sub(r'[.]json([.]gz)?$', '', label))}.json"


def show_figure(key: str, build: Callable[[], Figure], name: str, alt: str) -> None:
    """Show the figure ``build()`` (cached by ``key``) with PNG/SVG download buttons."""
    try:
        png = _png(key, build)
    except ValueError as e:  # the library names the problem (e.g. a missing iteration)
        st.warning(f"Cannot draw this view: {e}")
        return
    st.image(png, width="stretch", alt=alt)
    left, right, _ = st.columns([1, 1, 4])
    left.download_button("Figure (PNG)", png, file_name=f"{slug(name)}.png", mime="image/png",
                         on_click="ignore", key=f"png:{key}", icon=":material/download:")
    right.download_button("Figure (SVG)", lambda: figure_bytes(build(), "svg"),
                          file_name=f"{slug(name)}.svg", mime="image/svg+xml", on_click="ignore",
                          key=f"svg:{key}", icon=":material/download:")


def quick_or_asked(key: str, done: set, seconds: float, ask_s: float, button: str, widget_key: str, what: str) -> bool:
    """Whether the long work named ``key`` runs now: expected within ``ask_s`` seconds, run before in this
    session (``done``, which it joins), or its button pressed; else the button waits, and a caption says
    ``what`` it does and why it waits, so that moving a control stays quick."""
    if seconds > ask_s and key not in done and not st.button(f"{button} (about {seconds:.0f} s)", key=widget_key):
        st.caption(f"{what}, about {seconds:.0f} s here: it waits for the button, so that the choices above stay quick.")
        return False
    done.add(key)
    return True


def trace_downloads(container, label: str, trace: Trace, as_dict: Callable[[], dict] | None = None) -> None:
    """Download the open trace as ddpsim JSON (``as_dict()``, default ``trace.to_dict()``) and as a
    Chrome/Perfetto trace (made on click)."""
    name = trace_file(label).removesuffix(".json")
    with container:
        st.caption("Download the open trace")
        st.download_button("Trace (ddpsim JSON)", lambda: json.dumps((as_dict or trace.to_dict)()),
                           file_name=f"{name}.json", mime="application/json", on_click="ignore",
                           key="ddpsim_dl_trace", icon=":material/download:")
        st.download_button("Chrome / Perfetto trace", lambda: json.dumps(to_chrome(trace)),
                           file_name=f"{name}.chrome.json", mime="application/json",
                           on_click="ignore", key="ddpsim_dl_chrome", icon=":material/download:",
                           help="Open it in https://ui.perfetto.dev or chrome://tracing.")


def explain(*topics: str, expanded: bool = False) -> None:
    """A 'Why?' panel with the plain-language explanation of ``topics`` (see learn.py)."""
    with st.expander("Why does it look like this? (plain words, with sources)", expanded=expanded):
        for t in topics:
            st.markdown(learn.TOPICS[t].text)


def simulated_badge(trace: Trace) -> None:
    if trace.source == "simulated":
        w = trace.meta.get("workload") or {}
        st.info(f"SIMULATED run ({w.get('name', 'a workload')}): made by ddpsim.sim, not measured. "
                "GPU profiles are datasheet estimates.", icon=":material/science:")
    elif ran_on_cpu(trace):
        st.caption(learn.CPU_NOTE)


def ran_on_cpu(trace: Trace) -> bool:
    """A real run whose ranks computed on CPU cores (gloo, not an imported GPU profile)."""
    placement = (trace.meta.get("placement") or {}).get("device")
    return (trace.source == "real" and str(trace.meta.get("backend", "gloo")) == "gloo"
            and not trace.imported and placement != "cuda")


def has_iterations(trace: Trace) -> bool:
    """Whether any rank recorded an iteration (a run can stop before its first)."""
    return any(r.iterations for r in trace.ranks)


def partial_note(trace: Trace) -> None:
    """Say, once per page, what a trace lacks: a rank that stopped, any iteration, or its sizes
    (a profile taken without record_shapes: its buckets show as 0 bytes)."""
    if (why := unknown_sizes(trace)) is not None:
        st.warning(f"Sizes unknown, shown as 0 bytes. {why[0].upper()}{why[1:]}.", icon=":material/warning:")
    held = {r.rank for r in trace.ranks}  # a simulated trace keeps some ranks by design (meta.ranks_included)
    if trace.source == "real" and "ranks_included" not in trace.meta and (
            missing := sorted(set(range(trace.world_size)) - held)):
        st.warning(f"This trace holds {len(held)} of its {trace.world_size} ranks (no rank "
                   f"{', '.join(map(str, missing[:8]))}{', ...' if len(missing) > 8 else ''}): "
                   "the figures show the ranks it holds.", icon=":material/warning:")
    stopped = [r for r in trace.ranks if not r.complete]
    if not has_iterations(trace):
        why = next(filter(None, (first_line(r.error) for r in stopped)), "the run stopped before its first iteration")
        st.warning(f"This trace has no iteration to show: no rank recorded one ({why}). "
                   "Open another trace in the sidebar, or record the run again.", icon=":material/warning:")
    elif stopped:  # every rank with an error: the launcher's diagnosis may be on a rank that finished
        said = [(r, first_line(r.error)) for r in trace.ranks if not r.complete or r.error]
        st.warning("Partial trace: " + "; ".join(
            (f"rank {r.rank}" if r.complete else f"rank {r.rank} stopped after {len(r.iterations)} "
             f"iteration{'s' if len(r.iterations) != 1 else ''}") + (f" ({why})" if why else "") for r, why in said)
            + ". The figures show what was recorded.", icon=":material/warning:")


METRIC_HELP = {"iteration_time_s": "The median time of a steady iteration. " + ITERATION_TIME + " Under no_sync "
                                    "(a sync every n micro-steps) each micro-step counts as an iteration: the "
                                    "time is per micro-step, and n of them make one synced step (the time between the "
                                    "micro-steps is left out too).",
               "exposed_comm_s": "The communication backward waits for: from the last gradient becoming ready "
                                 "to the last allreduce's end (buckets, and find_unused_parameters' bitmap), "
                                 "on the rank that waits most, so it includes the time a faster rank waits "
                                 "in the allreduces for the slowest (the scaling figure's \"waiting\", apart "
                                 "from its \"exposed\"); the median over the steady iterations. Under "
                                 "no_sync, the synced step's wait over its n micro-steps.",
               "overlap_fraction": "HolisticTraceAnalysis's get_comm_comp_overlap: the communication time "
                                    "that overlaps compute, over all communication time, in the steady "
                                    "iterations (mean over ranks). Compute is the GPU's compute kernels for a "
                                    "trace imported from a GPU profile (and for simulations of one, its busy "
                                    "time stretched with each phase), elsewhere the backward up to its last "
                                    "gradient (docs/accuracy.md)."}


def delta_text(fmt: str, d: float) -> tuple[str, bool]:
    """A metric's change ``d`` as shown, and whether it rounds to nothing ("-0 pts" and "↑ 0.0 ms" read as changes)."""
    zero = fmt.format(abs(d)) == fmt.format(0)
    return fmt.format(0 if zero else d).replace("%", " pts"), zero


def metric_row(values: dict, base: dict | None = None, base_name: str = "") -> None:
    """Iteration time, exposed comm and overlap as st.metric, with deltas against ``base``."""
    cols = st.columns(3)
    spec = (("iteration_time_s", "Iteration time", *units.metric_unit(values["iteration_time_s"]), "inverse"),
            ("exposed_comm_s", "Exposed communication",
             *units.metric_unit(values["iteration_time_s"], values["exposed_comm_s"]), "inverse"),
            ("overlap_fraction", "Comm. overlapped with compute", "{:.0%}", 1, "normal"))
    for col, (k, name, fmt, scale, color) in zip(cols, spec):
        if k == "overlap_fraction" and not values.get("communicates", True):
            col.metric(name, "none", help="No collective communicated in the steady iterations (the noop hook "
                                          "sends nothing; one rank has no peer): there is nothing to overlap.")
            continue
        v = values[k] * scale
        delta, same = (None, False) if base is None else delta_text(fmt, v - base[k] * scale)
        col.metric(name, fmt.format(v), delta=delta, delta_color="off" if same else color,
                   delta_arrow="off" if same else "auto", help=METRIC_HELP.get(k),
                   delta_description=f"vs {base_name}" if base_name else None)
