"""A SIMULATED trace of a GPU model is that GPU model again, not a recording to learn from.

``simulate --arch`` (and ``ddpsim/samples/regenerate.py``) writes a trace whose ``meta.workload`` names
the synthetic workload it ran (``ddpsim.sim.archs.synthetic``: arch, GPU-NETWORK hardware, batch) and
whose ``meta.config`` holds its SimConfig. The What-if page and ``simulate --trace`` / ``sweep --trace``
both start from ``of_trace``: the same workload, the same options, so one file gives one number.

    >>> from ddpsim.sim import SimConfig
    >>> from ddpsim.sim.archs import arch_defaults
    >>> model = of_trace(load_trace("ddpsim/samples/20_sim_resnet50_v100-eth25_w64_default.json"))
    >>> work = model.workload()                   # synthetic("resnet50", "v100-eth25", batch=32)
    >>> cfg = SimConfig(**{**arch_defaults(work), **model.fields(), "world_size": 8})  # its options, 8 ranks
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ddpsim.sim import synthetic

ITERS = 3  # synced steps per simulation of a GPU model: iteration 0, the rebuild, one steady step
# the options a simulated trace keeps (the What-if page's controls); the rest are SimConfig's defaults
KEPT = ("world_size", "bucket_cap_mb", "find_unused_parameters", "no_sync_every", "order", "last_bucket_small")


@dataclass(frozen=True)
class GpuModel:
    """A synthetic workload's spec and the options a simulated trace of it ran with (``KEPT``)."""

    arch: str
    hardware: str  # GPU-NETWORK, as ``synthetic`` and ``--hardware`` take it
    batch: int | None = None
    config: dict = field(default_factory=dict, hash=False, compare=False)

    def workload(self, hardware: str | None = None, batch: int | None = None, tflops: float | None = None):
        """``synthetic(arch, hardware, batch)``; ``hardware``/``batch``/``tflops`` given: those instead."""
        return synthetic(self.arch, hardware or self.hardware, batch=self.batch if batch is None else batch, tflops=tflops)

    def fields(self) -> dict:
        """The SimConfig fields a simulation of this model starts from (``ITERS`` steps, the trace's
        options), before any change; the GPU model's defaults (``arch_defaults``) go under them."""
        return {"iters": ITERS, **self.config}


def of_trace(trace) -> GpuModel | None:
    """The GPU model a SIMULATED trace was made from (``meta.workload`` kind "synthetic"), with the
    options of its ``meta.config`` in ``KEPT``; None for a recording, an import, or a simulation of a
    workload learnt from a recording (those are learnt from: ``ddpsim.learn.learn``)."""
    if trace is None or trace.source != "simulated":
        return None
    w = trace.meta.get("workload") or {}
    if w.get("kind") != "synthetic" or "-" not in str(w.get("hardware", "")):
        return None
    cfg = trace.meta.get("config") or {}
    return GpuModel(str(w.get("arch", "resnet50")), str(w["hardware"]), w.get("batch"),
                    {k: cfg[k] for k in KEPT if k in cfg})
