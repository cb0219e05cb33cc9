"""Cached simulator calls for the app, keyed on strings that name the inputs.

Workloads are kept as resources (built once per source); simulations and sweeps as
data keyed on the source key and the SimConfig as JSON, so moving a slider back to a
value seen before costs nothing. Arguments starting with "_" are not hashed.
"""
from __future__ import annotations

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


@st.cache_data(max_entries=32, show_spinner="Sweeping bucket sizes x orderings x find_unused...")
def sweep(source_key: str, cfg_key: str, _work, _cfg: SimConfig, needs_fu: str | None = None):
    return layout_sweep.sweep_rows(_work, _cfg, needs_fu=needs_fu)  # as ``ddpsim sweep`` runs it


@st.cache_data(max_entries=64, show_spinner=False)
def sweep_seconds(source_key: str, cfg_key: str, _work, _cfg: SimConfig, needs_fu: str | None = None) -> float:
    return layout_sweep.expected_seconds(_work, _cfg, needs_fu)  # one simulation timed, once per sweep


@st.cache_data(max_entries=256, show_spinner="Simulating...")
def evaluate(source_key: str, cfg_key: str, _work, _base: whatif.Base, _trace, _cfg: SimConfig):
    """whatif.evaluate with both simulations cached (the unchanged one is shared by every change)."""
    return whatif.evaluate(_work, _base, _trace, _cfg,
                           lambda w, c: simulate(source_key, config_key(c), w, c))


@st.cache_data(max_entries=64, show_spinner="Simulating every world size...")
def scaling_rows(source_key: str, key: str, _work, _base: whatif.Base, _trace, _choices: dict):
    """scaling.rows with each simulation cached (the what-if's own world size is already there)."""
    return scaling.rows(_base, _trace, _work, _choices, lambda w, c: simulate(source_key, config_key(c), w, c))
