"""A source's GPU rate from its published 1-GPU step, and the simulations the published checks run.

``fit_tflops`` finds, by false position on log(TFLOP/s), the effective GPU rate at which the synthetic
architecture (``sim.archs``) on one GPU takes the published 1-GPU step: the only number a
published check learns from its source (``published.py``, ``published_scaling.py``).
A source is a dict with ``arch``, ``gpu``, ``batch``, ``unit`` ("s": seconds per iteration per
GPU; otherwise items/s over all GPUs), ``baseline`` (world size, value, ...) and, where it is known,
``torch``: the version the source ran, whose bucket layout the simulations take (``torch_layout``).
"""
from __future__ import annotations

import math
import re

ITERS = 6  # synced steps simulated per prediction
FIT_STEPS = 60  # most false-position steps on log(TFLOP/s) (a fit: 7-11 simulations in all)
FIT_MATCH = 1e-9  # a fit ends when its simulated step is within this share of the published one
# (a trace times in whole nanoseconds: 1e-9 of a 1 s step), or when its bracket on log(TFLOP/s)
FIT_WIDTH = 1e-9  # is this narrow: both far below the published figures' 3-4 digits


def step_time(src: dict, tflops: float, world_size: int, net: str = "nvlink", **config) -> float:
    """Simulated seconds per iteration (per micro-step with no_sync) of ``src``'s model at ``tflops``
    on ``world_size`` GPUs; ``config``: more SimConfig fields."""
    return simulate_src(src, tflops, world_size, net, **config)["iteration_time_s"]


def simulate_src(src: dict, tflops: float, world_size: int, net: str = "nvlink", **config) -> dict:
    """The simulation summary of ``src``'s model at ``tflops`` on ``world_size`` GPUs."""
    from ddpsim.sim.api import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic(src["arch"], f"{src['gpu']}-{net}", batch=src["batch"], tflops=tflops)
    return simulate(w, SimConfig(**{"world_size": world_size, "iters": ITERS, **torch_layout(src), **config}))[1]


# Note [The buckets of the torch a source ran]
# Since torch 1.6, DDP rebuilds its buckets in gradient-ready order after the first synced step
# (the c10d Reducer is in the libtorch_python.so of both the 1.4.0 and the 1.6.0 wheel;
# ``Reducer::rebuildBuckets`` only in 1.6.0's, called from the callback that ``mark_variable_ready``
# queues for the end of the backward). Before, it kept its constructor's buckets: 1 MiB,
# then bucket_cap_mb each, over the parameters in definition order, the list reversed (1.4.0's
# distributed.py: ``[1024 * 1024, self.bucket_bytes_cap]`` and ``list(reversed(bucket_indices))``).
# So in torch 1.4 the bucket reduced last, after the backward, holds the parameters defined first,
# up to the one that passes 1 MiB (ResNet-50: 1.6 MB); after a rebuild the 1 MiB goes to the
# gradients ready first and the last bucket is what is left (9.7 MB). The simulator's
# ``order="reverse"`` is that constructor layout, never rebuilt.
REBUILDS_SINCE = (1, 6)  # the first torch (major, minor) whose DDP rebuilds its buckets


def torch_layout(src: dict) -> dict:
    """SimConfig fields for the buckets of the torch ``src`` ran (its ``"torch"``, e.g. "1.4.0";
    none: the pinned torch's): Note [The buckets of the torch a source ran]."""
    # not torchcompat.torch_version, which imports torch: published runs without it
    found = re.match(r"(\d+)\.(\d+)", str(src.get("torch", "")))
    if found is None or (int(found[1]), int(found[2])) >= REBUILDS_SINCE:
        return {}
    return {"order": "reverse"}


def citation(src: dict) -> str:
    """``src``'s name and citation, with the torch it ran and, where they differ from the pinned
    torch's, the buckets simulated for it."""
    layout = " (simulated with DDP's constructor buckets, never rebuilt)" if torch_layout(src) else ""
    return f"{src['name']}: {src['cite']}" + (f" [torch {src['torch']}{layout}]" if src.get("torch") else "")


def as_step(src: dict, value: float, world_size: int) -> float:
    """A published value as seconds per iteration."""
    return value if src["unit"] == "s" else src["batch"] * world_size / value


def as_published(src: dict, step_s: float, world_size: int) -> float:
    return step_s if src["unit"] == "s" else src["batch"] * world_size / step_s


def fit_tflops(src: dict, **config) -> float:
    """The effective TFLOP/s at which the simulated 1-GPU step equals the published baseline.

    The root of ``excess`` (log of the simulated step over the published one, falling as the rate
    rises; nearly a straight line in log(TFLOP/s) where compute is the step) by false position with
    the Illinois step (the end that stays is halved): about ten simulations where bisection took forty."""
    ws, value = src["baseline"][:2]
    want = as_step(src, value, ws)

    def excess(x: float) -> float:
        return math.log(step_time(src, math.exp(x), ws, **config) / want)

    lo, hi = math.log(1e-3), math.log(1e4)
    f_lo, f_hi = excess(lo), excess(hi)
    if not f_hi < 0 < f_lo:
        raise ValueError(f"{src['name']}: no GPU rate gives the published {value} {src['unit']}")
    kept = 0  # which end the last step kept: -1 lo, +1 hi
    for _ in range(FIT_STEPS):
        x = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        f = excess(x)
        if abs(f) <= FIT_MATCH:
            return math.exp(x)
        if f > 0:
            lo, f_lo = x, f
            f_hi, kept = (f_hi / 2 if kept == 1 else f_hi), 1
        else:
            hi, f_hi = x, f
            f_lo, kept = (f_lo / 2 if kept == -1 else f_lo), -1
        if hi - lo < FIT_WIDTH:
            break
    return math.exp((lo + hi) / 2)


def noise(src: dict) -> dict:
    """The GPU profile's rank-to-rank spread, every rank waiting for the expected slowest (sim/stragglers.py)."""
    from ddpsim.sim.network import gpus

    return {"jitter": float(gpus()[src["gpu"]].get("rank_spread", 0.0)), "jitter_mode": "expected"}
