"""Cached simulator calls for the app, keyed on strings that name the inputs.

Workloads are kept as resources (built once per source); simulations and sweeps as
data keyed on the source key and the SimConfig as JSON, so moving a slider back to a
value seen before costs nothing. Arguments starting with "_" are not hashed.
"""
from __future__ import annotations

import contextlib
import json
from dataclasses import asdict

import streamlit as st

from ddpsim.app import scaling, whatif
from ddpsim.learn import layout_sweep
from ddpsim.sim import SimConfig


def config_key(cfg: SimConfig) -> str:
    return json.dumps(asdict(cfg), sort_keys=True, default=str)


@st.cache_resource(max_entries=16, show_spinner="Calibrating the simulator...")
def workload(source_key: str, _base: whatif.Base, _trace):
    return whatif.workload(_base, _trace)


@st.cache_data(max_entries=256, show_spinner=False)
def simulate(source_key: str, cfg_key: str, _work, _cfg: SimConfig):
    return whatif.run(_work, _cfg)


@contextlib.contextmanager
def progress_bar(what: str, unit: str):
    """``progress(done, total)``, drawing "what: done/total unit" on a bar while the block runs; the bar is
    gone after it. For a cached function: Streamlit replays what one draws when its result is reused, and a
    bar made and emptied inside it replays to nothing."""
    bar = st.progress(0.0, text=f"{what}...")
    try:
        yield lambda done, total: bar.progress(min(done / max(total, 1), 1.0), text=f"{what}: {done}/{total} {unit}")
    finally:
        bar.empty()


@st.cache_data(max_entries=32, show_spinner=False)
def sweep(source_key: str, cfg_key: str, _work, _cfg: SimConfig, needs_fu: str | None = None):
    with progress_bar("Sweeping bucket sizes x orderings x find_unused", "configurations") as tell:
        return layout_sweep.sweep_rows(_work, _cfg, needs_fu=needs_fu, progress=tell)  # as ``ddpsim sweep`` runs it


@st.cache_data(max_entries=64, show_spinner=False)
def sweep_seconds(source_key: str, cfg_key: str, _work, _cfg: SimConfig, needs_fu: str | None = None) -> float:
    return layout_sweep.expected_seconds(_work, _cfg, needs_fu)  # one simulation timed, once per sweep


@st.cache_data(max_entries=256, show_spinner="Simulating...")
def evaluate(source_key: str, cfg_key: str, _work, _base: whatif.Base, _trace, _cfg: SimConfig):
    """whatif.evaluate with both simulations cached (the unchanged one is shared by every change)."""
    return whatif.evaluate(_work, _base, _trace, _cfg,
                           lambda w, c: simulate(source_key, config_key(c), w, c))


@st.cache_data(max_entries=64, show_spinner=False)
def scaling_rows(source_key: str, key: str, _work, _base: whatif.Base, _trace, _choices: dict):
    """scaling.rows with each simulation cached (the what-if's own world size is already there)."""
    with progress_bar("Simulating every world size", "world sizes") as tell:
        return scaling.rows(_base, _trace, _work, _choices, lambda w, c: simulate(source_key, config_key(c), w, c),
                            progress=tell)
