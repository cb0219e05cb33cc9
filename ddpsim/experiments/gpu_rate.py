"""A source's GPU rate from its published 1-GPU step, and the simulations the published checks run.

``fit_tflops`` finds, by bisection on log(TFLOP/s), the effective GPU rate at which the synthetic
architecture (``sim.archs``) on one GPU takes the published 1-GPU step: the only number a
published check learns from its source (``published.py``, ``published_scaling.py``).
A source is a dict with ``arch``, ``gpu``, ``batch``, ``unit`` ("s": seconds per iteration per
GPU; otherwise items/s over all GPUs) and ``baseline`` (world size, value, ...).
"""
from __future__ import annotations

import math

ITERS = 6  # synced steps simulated per prediction
FIT_STEPS = 40  # bisection steps on log(TFLOP/s): 16/2^40, far below 0.1% of the baseline


def step_time(src: dict, tflops: float, world_size: int, net: str = "nvlink", **config) -> float:
    """Simulated seconds per iteration (per micro-step with no_sync) of ``src``'s model at ``tflops``
    on ``world_size`` GPUs; ``config``: more SimConfig fields."""
    return simulate_src(src, tflops, world_size, net, **config)["iteration_time_s"]


def simulate_src(src: dict, tflops: float, world_size: int, net: str = "nvlink", **config) -> dict:
    """The simulation summary of ``src``'s model at ``tflops`` on ``world_size`` GPUs."""
    from ddpsim.sim.api import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic(src["arch"], f"{src['gpu']}-{net}", batch=src["batch"], tflops=tflops)
    return simulate(w, SimConfig(**{"world_size": world_size, "iters": ITERS, **config}))[1]


def as_step(src: dict, value: float, world_size: int) -> float:
    """A published value as seconds per iteration."""
    return value if src["unit"] == "s" else src["batch"] * world_size / value


def as_published(src: dict, step_s: float, world_size: int) -> float:
    return step_s if src["unit"] == "s" else src["batch"] * world_size / step_s


def fit_tflops(src: dict, **config) -> float:
    """The effective TFLOP/s at which the simulated 1-GPU step equals the published baseline."""
    ws, value = src["baseline"][:2]
    want = as_step(src, value, ws)
    lo, hi = math.log(1e-3), math.log(1e4)
    if not step_time(src, math.exp(hi), ws, **config) < want < step_time(src, math.exp(lo), ws, **config):
        raise ValueError(f"{src['name']}: no GPU rate gives the published {value} {src['unit']}")
    for _ in range(FIT_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step_time(src, math.exp(mid), ws, **config) > want else (lo, mid)
    return math.exp((lo + hi) / 2)


def noise(src: dict) -> dict:
    """The GPU profile's rank-to-rank spread, every rank waiting for the expected slowest (sim/stragglers.py)."""
    from ddpsim.sim.network import gpus

    return {"jitter": float(gpus()[src["gpu"]].get("rank_spread", 0.0)), "jitter_mode": "expected"}
