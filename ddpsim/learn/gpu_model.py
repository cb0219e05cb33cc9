"""A SIMULATED trace of a GPU model is that GPU model again, not a recording to learn from.

``simulate --arch`` (and ``ddpsim/samples/regenerate.py``) writes a trace whose ``meta.workload`` names
the synthetic workload it ran (``ddpsim.sim.archs.synthetic``: arch, GPU-NETWORK hardware, batch, rate)
and whose ``meta.config`` holds its SimConfig. ``simulate --trace`` and ``sweep --trace`` start from
``of_trace``: the same workload and every option it ran with (``OPTIONS``), so one file gives one number.
Flags given change them as a recording's replay takes its options (``GpuModel.settings``: another bucket
cap drops the trace's ``bucket_cap_mb_list``); a refusal an option carried from the trace causes names
that option as its flag (``GpuModel.sim_config``). The What-if page simulates it the same way: its controls are
the flags, and they change only what they name (``ddpsim.app.whatif``).

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
from ddpsim.kinds import kind_of, kind_text, kinds, shown
from ddpsim.sim.config import ARCH_LIMITS
from ddpsim.sim.archs import arch_defaults
from ddpsim.sim.replay import replay_caps

ITERS = 3  # synced steps of a GPU model's simulation where the trace does not say: iteration 0, the rebuild, one steady step
# SimConfig fields a simulated trace's options leave out: the run's bounds, and how many ranks its file keeps
RUN_CONTROLS = ("max_events", "time_limit_s", "trace_ranks")
# options the GPU model derives (arch_defaults: its profile's rank spread, a hook's compute at its GPU's
# rates): kept only where the trace's differ from its own model's, so on another --hardware they are that GPU's
DERIVED = ("jitter", "jitter_mode", "hook_rates")
BY_RANK = ("stragglers", "backward_scale", "synced_backward_scale", "recorded_ranks")  # rank -> value; JSON wrote the ranks as strings
DEFAULTS = {f.name: f.default if f.default is not MISSING else f.default_factory() for f in dataclass_fields(SimConfig)}
OPTIONS = tuple(k for k in DEFAULTS if k not in RUN_CONTROLS)  # every option a simulated trace carries
THE_TRACE = "the simulated trace's meta"  # a refusal of one of its fields: "THE_TRACE.config.comm_hook must be..."
# meta.workload's keys -> GpuModel's fields (their declared kinds; --batch's and --tflops's ranges)
WORKLOAD = {"arch": "arch", "hardware": "hardware", "batch": "batch", "effective_tflops": "tflops"}
NO_FLAG_HERE = "this command has no flag for it"  # what ``checked`` says of a carried option the caller cannot set


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

    def settings(self, changes: dict) -> dict:
        """The SimConfig fields of this model under ``changes`` (the flags given), as a recording's replay
        takes them (``replay_caps``): another bucket cap, or a first bucket's, drops the trace's
        bucket_cap_mb_list; a bucket_cap_mb_list given drops its first_bucket_cap_mb."""
        return {**replay_caps(self.fields(), changes), **changes}

    def sim_config(self, work, changes: dict, source: str, offered=None, here: str = NO_FLAG_HERE) -> SimConfig:
        """The validated SimConfig of this model on ``work`` (its ``arch_defaults`` under ``settings``); a
        refusal that an option carried from the trace (not in ``changes``) causes says so, as its flag
        (``offered``, ``here``: as ``checked`` takes them; the What-if page passes its controls)."""
        return checked(self.settings(changes), lambda f: make_config(work, f), self.carried(changes), source, offered, here)

    def carried(self, changes: dict) -> list[str]:
        """The options of the trace that ``changes`` leave as they ran."""
        return [k for k in self.config if k not in changes]


def make_config(work, fields: dict, base: dict | None = None) -> SimConfig:
    """``fields`` over ``base`` (default: nothing) over the GPU model's defaults on ``work``, validated."""
    both = {**(base or {}), **fields}
    cfg = SimConfig(**{**arch_defaults(work, both.get("comm_hook"), both.get("powersgd_rank")), **both})
    cfg.validate()
    return cfg


def checked(fields: dict, make, carried: list[str], source: str, offered=None, here: str = NO_FLAG_HERE):
    """``make(fields)``; where it raises a ValueError, the same with the carried options without which it
    passes (each back at SimConfig's default) named as their flags, "carried from SOURCE's options", and how
    to change them: with the command's own flag where it has one (``offered``: the SimConfig fields it takes
    as flags, None: all), else (``here`` says so) by writing a trace without it with ``simulate``."""
    try:
        return make(fields)
    except ValueError as e:
        blamed = [k for k in carried if k in fields and fields[k] != DEFAULTS[k] and _passes(make, {**fields, k: DEFAULTS[k]})]
        if not blamed:
            raise
        how = [_elsewhere(k, source, here) if offered is not None and k not in offered
               else f"{flag_text(k, False)} drops it" if fields[k] is True else f"a {flag_text(k, fields[k]).split()[0]} "
               "given replaces it" for k in blamed]
        raise ValueError(f"{e} ({', '.join(flag_text(k, fields[k]) for k in blamed)} carried from {source}'s "
                         f"options: {'; '.join(how)})") from None


def _elsewhere(name: str, source: str, here: str = NO_FLAG_HERE) -> str:
    """How to drop a carried option the caller has no flag for (``here`` says so): ``simulate`` writes a trace without it."""
    reset = flag_text(name, DEFAULTS[name])
    if not reset.startswith("--"):  # no flag sets the default back (stragglers: a given one replaces them)
        return here
    return f"{here}; `ddpsim simulate --trace {source} {reset} --out OTHER.json` writes a trace without it"


def _passes(make, fields: dict) -> bool:
    try:
        make(fields)
    except ValueError:
        return False
    return True


def same_gpu(a: str, b: str) -> bool:
    return a.lower().partition("-")[0] == b.lower().partition("-")[0]


def of_trace(trace) -> GpuModel | None:
    """The GPU model a SIMULATED trace was made from (``meta.workload`` kind "synthetic"), with the
    options of its ``meta.config`` (``OPTIONS``); None for a recording, an import, or a simulation of a
    workload learnt from a recording (those are learnt from: ``ddpsim.learn.learn``). A field of either of
    another kind than GpuModel's or SimConfig's, or out of the range its flag takes: a ValueError naming it."""
    if trace is None or trace.source != "simulated":
        return None
    w = trace.meta.get("workload") or {}
    if w.get("kind") != "synthetic" or "-" not in str(w.get("hardware", "")):
        return None
    said = {name: w[key] for key, name in WORKLOAD.items() if w.get(key) is not None}  # null: synthetic's default
    for key, name in WORKLOAD.items():
        if name in said:
            check_field(f"workload.{key}", said[name], kinds(GpuModel)[name], ARCH_LIMITS.get(name), f"--{name}")
    try:
        gpu, _ = network.parse_hardware(said["hardware"])
    except ValueError as e:
        raise ValueError(f"{THE_TRACE}.workload.hardware: {e}") from None
    rate = said.get("tflops")
    tflops = float(rate) if rate is not None and rate != gpu["effective_tflops"] else None
    model = GpuModel(said.get("arch", "resnet50"), said["hardware"], said.get("batch"), {}, tflops)
    try:
        model.workload()  # an arch synthetic knows (options builds it again)
    except ValueError as e:
        raise ValueError(f"{THE_TRACE}.workload: {e}") from None
    return GpuModel(model.arch, model.hardware, model.batch, options(trace.meta.get("config") or {}, model), tflops)


def check_field(name: str, value, kind, bounds: tuple | None = None, flag: str = "") -> None:
    """A field ``name`` of a simulated trace's meta of the declared ``kind`` (``kind_of``: a real bool, a
    finite number, a non-empty name...), within ``bounds`` (lowest, highest: ``flag``'s) where given; else a
    ValueError naming it. (SimConfig's ranges: ``SimConfig.validate``, a refusal naming its flag: ``checked``.)"""
    if not kind_of(value, kind):
        raise ValueError(f"{THE_TRACE}.{name} must be {kind_text(kind)}, not {shown(value)}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{THE_TRACE}.{name} must be between {bounds[0]:g} and {bounds[1]:g} (as {flag} takes), "
                         f"not {shown(value)}")


def options(cfg: dict, model: GpuModel) -> dict:
    """The options of a simulated trace's ``meta.config``: every one but the run controls, those the GPU
    model derives only where they differ from its own (``DERIVED``), its hardware only where another
    than the workload's (``simulate --arch --hardware`` sets both). Each of the kind SimConfig declares
    (``check_field``); null: SimConfig's default."""
    if not isinstance(cfg, dict):
        raise ValueError(f"{THE_TRACE}.config must be an object of SimConfig's fields, not {shown(cfg)}")
    said = [k for k in OPTIONS if k in cfg and (cfg[k] is not None or DEFAULTS[k] is None)]  # null: SimConfig's default
    for k in said:
        check_field(f"config.{k}", cfg[k], kinds(SimConfig)[k])
    kept = {k: ({int(r): v for r, v in cfg[k].items()} if k in BY_RANK else cfg[k]) for k in said}
    own = {**{k: DEFAULTS[k] for k in DERIVED}, "hardware": model.hardware,
           **arch_defaults(model.workload(), kept.get("comm_hook"), kept.get("powersgd_rank"))}
    return {k: v for k, v in kept.items() if k not in own or v != own[k]}


FLAG = {"stragglers": "--straggler", "time_limit_s": "--time-limit"}  # the rest: --the-field-name
NO_FLAG = ("hook_rates", "recorded_ranks", "backward_scale", "synced_backward_scale")  # set by the model, not by a flag: "name value"


def flag_text(name: str, value) -> str:
    """An option as the ``simulate`` flags that set it: ``--straggler 2:1.5``, ``--naive``,
    ``--no-broadcast-buffers``, ``--bucket-cap-mb-list 1 5 25``, ``--order 0,1,...,160`` (a long list cut)."""
    if name in NO_FLAG:
        return f"{name} {value}"
    flag = FLAG.get(name, "--" + name.replace("_", "-"))
    if name == "stragglers":
        return " ".join(f"{flag} {r}:{f:g}" for r, f in sorted(value.items()))
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    if value is None:
        return f"{flag} default"
    if name == "bucket_cap_mb_list":
        return f"{flag} {' '.join(f'{v:g}' for v in value)}"
    if isinstance(value, (list, tuple)):
        shown = [str(v) for v in value] if len(value) <= 8 else [*map(str, value[:3]), "...", str(value[-1])]
        return f"{flag} {','.join(shown)}"
    return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"
