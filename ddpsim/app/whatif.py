"""What-if plumbing without Streamlit: where a simulation starts from, and its options.

A what-if simulates a *workload* under a changed SimConfig:
- for a real trace, the workload is learnt from the trace (``ddpsim.learn.learn``) and
  every configuration is the trace's replay with the changes (``ddpsim.learn.replay_config``),
  as ``simulate --trace`` builds it; another world size goes through
  ``ddpsim.experiments.worldsize`` (the trace's calibration, one measured here, or a refusal);
- for a SIMULATED trace of a GPU model (a bundled sample, or ``simulate --out``), it is the GPU model the
  trace was made from (``learn.gpu_model.of_trace``: arch, hardware, batch, --tflops, every option it ran
  with), and every configuration is ``GpuModel.sim_config`` of the controls moved from where they start
  (``choices``), as ``simulate --trace`` takes its flags: the rest (stragglers, jitter, Join...) as it ran;
- or a synthetic GPU workload picked by hand (arch x GPU x network). Thin calls: ``ddpsim.sim``'s changes are met here.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ddpsim.analysis import spread, steady_summary
from ddpsim.analysis.unused import needs_find_unused, refusal
from ddpsim.app import beyond, hook_cautions, waiting
from ddpsim.learn import gpu_model, hardware, hookrates, layout_sweep, learn, replay_config, simulate
from ddpsim.learn.extract import config_from_trace
from ddpsim.learn.scaling import WORLD_SIZES
from ddpsim.sim import SimConfig, synthetic
from ddpsim.sim.network import networks
from ddpsim.trace import Trace, quiet_ranks

ARCHS = ("resnet50", "bert-large", "gpt2")
ORDERS = ("torch", "reverse", "definition", "ready", "random")
# the sweep's layouts and its number of simulations (77), as ``ddpsim sweep`` runs them
SWEEP_CAPS, SWEEP_ORDERS, SWEEP_RUNS = layout_sweep.SWEEP_CAPS, layout_sweep.SWEEP_ORDERS, layout_sweep.SWEEP_RUNS
CAPS = (None, *SWEEP_CAPS)  # None: torch default; the slider's values are the sweep's: a best cap is selectable
SWEEP_RANKS = 2  # simulated ranks the sweep's 77 rows each keep and summarise (the what-if: simulate's 8)
SIM_ITERS = gpu_model.ITERS  # synced steps per simulation of a GPU model (simulate --trace of a simulated one too)
HOOKS = (None, "fp16", "bf16", "powersgd", "noop", "round-robin:2")  # comm hook what-ifs (None: DDP's own allreduce)
POWERSGD_START = 2  # synced steps before PowerSGD starts here (torch's default 1000 is past any simulated run)
AS_RECORDED = "as recorded"
AS_RAN = "as the trace ran"  # the ordering selector's value for a simulated trace's ordering given as indices
# SimConfig fields the page has a control for (the rest of a simulated trace's options: only as it ran)
PAGE_FIELDS = ("world_size", "bucket_cap_mb", "order", "find_unused_parameters", "no_sync_every", "algo",
               "last_bucket_small", "comm_hook", "powersgd_start_iter")
NO_CONTROL = "this page has no control for it"  # a refusal's words for such an option (``gpu_model.checked``)


@dataclass(frozen=True)
class Base:
    """Where a what-if starts: a workload spec and the options it was run with."""

    kind: str  # "trace" (calibrated from a recorded trace) or "synthetic"
    arch: str = ""
    gpu: str = ""
    network: str = ""
    batch: int | None = None
    config: dict = field(default_factory=dict, hash=False, compare=False)
    model: gpu_model.GpuModel | None = field(default=None, hash=False, compare=False)  # a SIMULATED trace's
    source: str = ""  # that trace's file, as the page's command and refusals name it

    @property
    def hardware(self) -> str:
        return f"{self.gpu}-{self.network}"


def base_for(trace: Trace | None, source: str = "") -> Base:
    """The Base of a trace: calibrated from a real one, the GPU model of a simulated one (``source``: its file)."""
    if (model := gpu_model.of_trace(trace)) is not None:  # as simulate --trace and sweep --trace take it
        gpu, _, net = model.hardware.partition("-")
        return Base("synthetic", model.arch, gpu, net, model.batch, model.config, model, source or "this trace")
    if trace is not None:
        return Base("trace", config=config_from_trace(trace))
    return Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 64})


def workload(base: Base, trace: Trace | None):
    """The simulator's Workload for ``base`` (``trace`` is needed when kind is "trace")."""
    if base.kind == "trace":
        return learn(trace)
    if base.model is not None:  # its rate too (--tflops)
        return base.model.workload()
    return synthetic(base.arch, base.hardware, batch=base.batch)


TIME_LIMIT_S = 20.0  # seconds a page's simulation may run before it stops with a one-line error


def sim_config(base: Base, bucket_cap_mb=None, order="torch", find_unused_parameters=False,
               no_sync_every=1, world_size=None, network=AS_RECORDED, trace_ranks=None, work=None,
               trace: Trace | None = None, algo=None, broadcast_buffers=None, comm_hook=None,
               last_bucket_small=None, noise: str = "recorded") -> SimConfig:
    """A SimConfig for the what-if choices. A recorded trace (``work`` learnt from ``trace``): its
    replay with the changes (``replay_config``: at its world size its ranks as recorded, a hook's
    cost as its ranks measured it; ``noise="drawn"``: its ranks' speeds drawn around their medians, as at
    another world size); a network other than the recorded one overrides the link.
    A GPU model (``work``: its synthetic workload, built when not given): ``gpu_config``."""
    ws = int(world_size or base.config.get("world_size", 2))
    changes = {"world_size": ws, "bucket_cap_mb": bucket_cap_mb, "order": order,
               "find_unused_parameters": bool(find_unused_parameters), "no_sync_every": int(no_sync_every),
               "time_limit_s": TIME_LIMIT_S}
    if trace_ranks is not None:  # None: SimConfig's, as simulate prints them (its exposed comm is the max over them)
        changes["trace_ranks"] = int(trace_ranks)
    if broadcast_buffers is not None:  # None: as recorded
        changes["broadcast_buffers"] = bool(broadcast_buffers)
    if last_bucket_small is not None:  # None: as recorded (a GPU model: torch's default, off)
        changes["last_bucket_small"] = bool(last_bucket_small)  # torch's DDP_SET_LAST_BUCKET_CAP=1
    if comm_hook:  # what each hook sends: ddpsim/sim/comm_hooks.py
        changes.update(comm_hook=comm_hook, **({"powersgd_start_iter": POWERSGD_START} if comm_hook == "powersgd" else {}))
    if base.kind != "trace":
        return gpu_config(base, {**changes, "algo": algo}, workload(base, None) if work is None else work)
    if work is not None and trace is not None:
        if (refused := refusal(trace, find_unused_parameters, bool(base.config.get("static_graph")))):
            raise ValueError(": ".join(refused))  # the recorded model cannot run so (ddpsim/analysis/unused.py)
        if network not in (AS_RECORDED, None, "") and (spec := hardware.hardware_of(trace, network)):
            changes["hardware"] = spec  # a GPU recording: NCCL on its GPU's nodes, as simulate --hardware
        elif network not in (AS_RECORDED, None, ""):  # a CPU recording: the profile as one flat link
            prof = networks()[network]
            changes.update({"bandwidth_gbps": float(prof["bandwidth_gbps"]), "latency_us": float(prof["latency_us"]),
                            "concurrency": int(prof.get("concurrency", 1)),
                            "interference": float(prof.get("interference", 0))})
        return replay_config(work, trace, noise=noise, **changes)
    return SimConfig(algo=algo, **run_controls(base), **changes)  # algo: NCCL_ALGO (None: auto)


def gpu_config(base: Base, picked: dict, work) -> SimConfig:
    """A GPU model's SimConfig for the page's ``picked`` fields (algo: NCCL_ALGO, None: auto). A simulated
    trace's: ``GpuModel.sim_config`` of the controls moved from ``choices`` (a hook chosen, the run controls),
    so the rest is as it ran and the unchanged one is ``simulate --trace``'s; a refusal an option carried
    from it causes names it as its flag. One picked by hand: ``--arch``'s, its profile's rank noise and hook
    rates (``gpu_model.make_config``)."""
    if base.model is None:
        return gpu_model.make_config(work, {**run_controls(base), **picked})
    now = choices(base)
    moved = {k: v for k, v in picked.items() if k not in now or v != now[k]}
    return base.model.sim_config(work, moved, base.source, PAGE_FIELDS, NO_CONTROL)


def run_controls(base: Base) -> dict:
    """A GPU model's steps and seed: a simulated trace's own, as ``simulate --trace`` takes them."""
    return {"iters": int(base.config.get("iters", SIM_ITERS)), "seed": int(base.config.get("seed", 0))}


def run(work, cfg: SimConfig) -> tuple[Trace, dict]:
    """One simulation (a thin call into ddpsim.sim.simulate)."""
    return simulate(work, cfg)


def sweep_needs_fu(base: Base, trace: Trace | None) -> str | None:
    """Why the sweep must keep find_unused_parameters on (a recording that marked a parameter unused), or None."""
    return needs_find_unused(trace, bool(base.config.get("static_graph"))) if base.kind == "trace" else None


def backend(base: Base, trace: Trace | None, network: str = AS_RECORDED) -> str | None:
    """The process-group backend the what-if's runs would use: the recording's (a GPU model, None: NCCL's),
    except a GPU recording on another network, which runs NCCL between its GPU's nodes (``sim_config``)."""
    if base.kind != "trace" or trace is None:
        return None
    if network not in (AS_RECORDED, None, "") and hardware.hardware_of(trace, network):
        return "nccl"
    return str(trace.meta.get("backend") or "") or None


def choices(base: Base) -> dict:
    """The widget defaults that reproduce the run as recorded (nothing changed)."""
    c = base.config
    order = c.get("order", "torch")
    order = order if order in ORDERS else AS_RAN if base.model is not None else "torch"
    return {"bucket_cap_mb": c.get("bucket_cap_mb"), "order": order,
            "find_unused_parameters": bool(c.get("find_unused_parameters")),
            "no_sync_every": int(c.get("no_sync_every") or 1), "world_size": int(c.get("world_size", 2)),
            "network": AS_RECORDED if base.kind == "trace" else base.network,
            "algo": None if base.kind == "trace" else c.get("algo"),  # a simulated trace's NCCL_ALGO
            "broadcast_buffers": bool(c.get("broadcast_buffers", True)),
            "last_bucket_small": bool(c.get("last_bucket_small", False))}


def order_options(base: Base) -> list[str]:
    """The ordering selector's values: ORDERS, and a simulated trace's ordering by indices (``AS_RAN``)."""
    return [*ORDERS, *([AS_RAN] if choices(base)["order"] == AS_RAN else [])]


def cap_options(base: Base) -> list:
    """The bucket-cap slider's values: CAPS plus the recorded cap, so it can be selected back."""
    extra = [base.config["bucket_cap_mb"]] if base.config.get("bucket_cap_mb") not in CAPS else []
    return [None] + sorted([*SWEEP_CAPS, *extra])


def world_options(base: Base) -> list[int]:
    """The world-size slider's values: WORLD_SIZES plus the recorded world size."""
    return sorted(set(WORLD_SIZES) | {int(base.config.get("world_size", 2))})


@dataclass
class Outcome:
    """A what-if against the unchanged configuration simulated from the same calibration.

    change: metric -> (what-if - unchanged) / unchanged; both simulated, so the model's own error on
    this run cancels to first order. replay_error: metric -> (unchanged simulated - recorded) / recorded,
    the model's error on the run itself (None without a recorded run). noise: how much the recorded
    run's iterations vary (+-fraction of the median), the smallest change a measurement could tell apart
    (None without a recorded run)."""

    sim: Trace
    summary: dict
    unchanged: Trace
    unchanged_summary: dict
    recorded_summary: dict | None
    change: dict
    replay_error: dict | None
    noise: float | None
    noise_iterations: int
    cautions: list[str]
    waits: tuple = (0.0, 0.0)  # seconds per iteration waiting for the slowest rank: what-if, unchanged
    rank_spread: float = 0.0  # the what-if's rank-to-rank spread: drawn, or its replayed ranks' as measured
    spread_source: str = ""
    replay_summary: dict | None = None  # the run replayed, where ``unchanged`` draws its ranks as the what-if does
    unchanged_cfg: SimConfig | None = None  # what ``unchanged`` simulated (the Compare page keeps it by it)
    quiet_exposed: float | None = None  # the what-if's exposed comm without its rank spread, in seconds

    @property
    def replayed(self) -> dict:
        """The unchanged configuration as the recorded run's replay: what the replay error is about."""
        return self.replay_summary or self.unchanged_summary

    @property
    def within_noise(self) -> bool:
        return self.noise is not None and abs(self.change["iteration_time_s"]) <= self.noise


METRICS = ("iteration_time_s", "exposed_comm_s")


def _rel(a: dict, b: dict) -> dict:
    return {m: (a[m] - b[m]) / b[m] if b[m] else 0.0 for m in METRICS}


def cautions(base: Base, trace: Trace | None, cfg: SimConfig, work=None) -> list[str]:
    """Plain warnings when the what-if reaches far beyond what was recorded."""
    recorded = int(base.config.get("world_size", 2))
    chosen = cfg.bandwidth_gbps is not None or cfg.hardware is not None
    out = beyond.far_cautions(trace, work, recorded, cfg.world_size, chosen) if base.kind == "trace" else []
    learnt = trace if base.kind == "trace" else None  # a simulated sample replays its GPU model, whose rates it has
    out += [c for c in [quiet_ranks(trace) if learnt else None, hookrates.caution(learnt, cfg.comm_hook, work, cfg.world_size),
                        waiting.uneven_caution(work if base.kind == "trace" else None, cfg.world_size, cfg.comm_hook)] if c]
    if base.kind == "trace" and not chosen and cfg.bucket_cap_mb_list is None:  # the recording's own allreduce line
        out += [c for c in [layout_sweep.beyond_fitted_sizes(cfg.bucket_cap_mb, work, trace)] if c]
    if base.kind == "trace" and chosen:
        out.append(beyond.other_network(cfg, float(getattr(getattr(work, "link", None), "interference", 0.0) or 0.0),
                                 trace.meta.get("gpu")))
    return out


def evaluate(work, base: Base, trace: Trace | None, cfg: SimConfig, simulate_fn=None) -> Outcome:
    """Simulate ``cfg`` and the unchanged configuration from the same workload, and compare.

    simulate_fn(work, cfg) -> (trace, summary) defaults to ``run`` (the app passes a cached one).
    With nothing changed ``cfg`` equals the unchanged config and the change is exactly 0.
    """
    sim_fn = simulate_fn or run
    unchanged_cfg = unchanged_config(base, work, trace, cfg.trace_ranks)
    sim, summary = sim_fn(work, cfg)
    unchanged, unchanged_summary = sim_fn(work, unchanged_cfg)
    replayed = None  # Note [The unchanged run is simulated as the what-if is]
    if base.kind == "trace" and unchanged_cfg.recorded_ranks and not cfg.recorded_ranks:
        replayed = unchanged_summary
        drawn = unchanged_config(base, work, trace, cfg.trace_ranks, noise="drawn")
        unchanged_cfg = replace(drawn, backward_scale={})  # ranks at the median speed
        unchanged, unchanged_summary = sim_fn(work, unchanged_cfg)
    # a simulated sample was made by this same model: no measured spread, no replay error to show
    recorded = steady_summary(trace) if trace is not None and trace.source == "real" else None
    noise, n = None, 0
    if recorded is not None:
        s = spread(trace)["iteration_time_s"]
        noise, n = (s["rel"], s["n"]) if s["n"] >= 2 else (None, s["n"])  # one iteration has no spread
    waits, quiet_exposed = waiting.waits_of(sim_fn, work, (cfg, summary), (unchanged_cfg, unchanged_summary))
    ranks_cv, source = waiting.rank_noise(base.kind, base.gpu, work if base.kind == "trace" else None, cfg.world_size,
                                          cfg.hardware)
    return Outcome(sim, summary, unchanged, unchanged_summary, recorded, _rel(summary, unchanged_summary),
                   _rel(replayed or unchanged_summary, recorded) if recorded else None, noise, n,
                   cautions(base, trace, cfg, work) + hook_cautions.powersgd_gloo_caution(trace, cfg, summary), waits,
                   cfg.jitter or (ranks_cv if cfg.recorded_ranks else 0.0), source, replayed, unchanged_cfg, quiet_exposed)


# Note [The unchanged run is simulated as the what-if is]
# At its own world size a recording is replayed: each recorded rank as it was in each recorded step
# (learn/noise.py). At another world size there are no recorded ranks to replay, and each rank's
# speed is drawn around the recorded medians (learn.replay_config). The two ways differ on the same
# run: the sum of each phase's median is not the median iteration (a 1-rank ResNet-50 H100 import:
# 67.3 ms drawn, 67.8 ms replayed; the 2-rank mlp sample 38.3 against 39.4 ms). Held against the
# replay, that difference read as the world size's effect: 8 H100s ran "-0.7%" faster per iteration
# than the one that was profiled, with more communication. So where the what-if draws its ranks,
# the unchanged configuration is simulated the same way, every rank at the median speed as at another
# world size (no rank of it is known to be lastingly slow: a caution says so where the recorded ones
# were), and the replay is kept for the replay error.


def unchanged_config(base: Base, work, trace: Trace | None, trace_ranks=None, noise: str = "recorded") -> SimConfig:
    """The configuration the page's controls start at (``choices``): the run as the page simulates it
    (``noise="drawn"``: its ranks' speeds drawn, as at another world size)."""
    c = choices(base)
    return sim_config(base, c["bucket_cap_mb"], c["order"], c["find_unused_parameters"], c["no_sync_every"],
                      c["world_size"], c["network"], trace_ranks, work, trace, c["algo"],
                      last_bucket_small=c["last_bucket_small"], noise=noise)
