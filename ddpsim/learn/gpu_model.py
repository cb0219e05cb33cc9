"""A SIMULATED trace of a GPU model is that GPU model again, not a recording to learn from.

``simulate --arch`` (and ``ddpsim/samples/regenerate.py``) writes a trace whose ``meta.workload`` names
the synthetic workload it ran (``ddpsim.sim.archs.synthetic``: arch, GPU-NETWORK hardware, batch, rate)
and whose ``meta.config`` holds its SimConfig. ``simulate --trace`` and ``sweep --trace`` start from
``of_trace``: the same workload and every option it ran with (``OPTIONS``), so one file gives one number.
The What-if page's controls set fewer of them (``PAGE``): it names the others (``not_on_page``).

    >>> from ddpsim.sim import SimConfig
    >>> from ddpsim.sim.archs import arch_defaults
    >>> from ddpsim.trace import load_trace
    >>> model = of_trace(load_trace("ddpsim/samples/20_sim_resnet50_v100-eth25_w64_default.json"))
    >>> work = model.workload()                   # synthetic("resnet50", "v100-eth25", batch=32)
    >>> cfg = SimConfig(**{**arch_defaults(work), **model.fields(), "world_size": 8})  # its options, 8 ranks
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field
from dataclasses import fields as dataclass_fields

from ddpsim.sim import SimConfig, network, synthetic
from ddpsim.sim.archs import arch_defaults

ITERS = 3  # synced steps of a GPU model's simulation where the trace does not say: iteration 0, the rebuild, one steady step
# SimConfig fields a simulated trace's options leave out: the run's bounds, and how many ranks its file keeps
RUN_CONTROLS = ("max_events", "time_limit_s", "trace_ranks")
# options the GPU model derives (arch_defaults: its profile's rank spread, a hook's compute at its GPU's
# rates): kept only where the trace's differ from its own model's, so on another --hardware they are that GPU's
DERIVED = ("jitter", "jitter_mode", "hook_rates")
BY_RANK = ("stragglers", "backward_scale", "recorded_ranks")  # rank -> value; JSON wrote the ranks as strings
# the options the What-if page sets (its controls, and the run's steps and seed, which it has no control for)
PAGE = ("world_size", "bucket_cap_mb", "find_unused_parameters", "no_sync_every", "order", "last_bucket_small",
        "iters", "seed")
DEFAULTS = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in dataclass_fields(SimConfig)}
OPTIONS = tuple(k for k in DEFAULTS if k not in RUN_CONTROLS)  # every option a simulated trace carries


@dataclass(frozen=True)
class GpuModel:
    """A synthetic workload's spec and the options a simulated trace of it ran with (``OPTIONS``)."""

    arch: str
    hardware: str  # GPU-NETWORK, as ``synthetic`` and ``--hardware`` take it
    batch: int | None = None
    config: dict = field(default_factory=dict, hash=False, compare=False)
    tflops: float | None = None  # the rate it ran at where ``--tflops`` set another than its GPU profile's

    def workload(self, hardware: str | None = None, batch: int | None = None, tflops: float | None = None):
        """``synthetic(arch, hardware, batch, tflops)``; ``hardware``/``batch``/``tflops`` given: those
        instead. Its own rate is its GPU's: on another GPU that GPU's profile rate."""
        own = self.tflops if same_gpu(hardware or self.hardware, self.hardware) else None
        return synthetic(self.arch, hardware or self.hardware, batch=self.batch if batch is None else batch,
                         tflops=own if tflops is None else tflops)

    def fields(self) -> dict:
        """The SimConfig fields a simulation of this model starts from (the trace's options; ``ITERS``
        steps where it has none), before any change; the GPU model's defaults (``arch_defaults``) go under them."""
        return {"iters": ITERS, **self.config}


def same_gpu(a: str, b: str) -> bool:
    return a.lower().partition("-")[0] == b.lower().partition("-")[0]


def of_trace(trace) -> GpuModel | None:
    """The GPU model a SIMULATED trace was made from (``meta.workload`` kind "synthetic"), with the
    options of its ``meta.config`` (``OPTIONS``); None for a recording, an import, or a simulation of a
    workload learnt from a recording (those are learnt from: ``ddpsim.learn.learn``)."""
    if trace is None or trace.source != "simulated":
        return None
    w = trace.meta.get("workload") or {}
    if w.get("kind") != "synthetic" or "-" not in str(w.get("hardware", "")):
        return None
    gpu, _ = network.parse_hardware(str(w["hardware"]))
    rate = w.get("effective_tflops")
    tflops = float(rate) if isinstance(rate, (int, float)) and rate != gpu["effective_tflops"] else None
    model = GpuModel(str(w.get("arch", "resnet50")), str(w["hardware"]), w.get("batch"), {}, tflops)
    return GpuModel(model.arch, model.hardware, model.batch, options(trace.meta.get("config") or {}, model), tflops)


def options(cfg: dict, model: GpuModel) -> dict:
    """The options of a simulated trace's ``meta.config``: every one but the run controls, those the GPU
    model derives only where they differ from its own (``DERIVED``), its hardware only where another
    than the workload's (``simulate --arch --hardware`` sets both)."""
    kept = {k: ({int(r): v for r, v in cfg[k].items()} if k in BY_RANK else cfg[k]) for k in OPTIONS if k in cfg}
    own = {**{k: DEFAULTS[k] for k in DERIVED}, "hardware": model.hardware,
           **arch_defaults(model.workload(), kept.get("comm_hook"), kept.get("powersgd_rank"))}
    return {k: v for k, v in kept.items() if k not in own or v != own[k]}


def not_on_page(model: GpuModel) -> list[str]:
    """The options ``model`` ran with that the What-if page does not set (``PAGE``), as "name value"."""
    out = [f"{k} {v}" for k, v in model.config.items() if k not in PAGE and v != DEFAULTS[k]]
    return out + ([f"tflops {model.tflops:g}"] if model.tflops is not None else [])
