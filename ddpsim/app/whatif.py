"""What-if plumbing without Streamlit: where a simulation starts from, and its options.

A what-if simulates a *workload* under a changed SimConfig:
- for a real trace, the workload is calibrated from the trace
  (``ddpsim.sim.workload_from_trace``) and the base options are the recorded ones;
- for a simulated GPU trace (a bundled sample), it is the synthetic workload the
  trace was made from (``meta.workload``: arch, hardware, batch);
- or a synthetic GPU workload picked by hand (arch x GPU x network).
These are thin calls into ``ddpsim.sim`` so that API changes there are fixed here.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ddpsim.sim import SimConfig, simulate, sweep, synthetic, workload_from_trace
from ddpsim.sim.extract import config_from_trace
from ddpsim.sim.network import gpus, networks
from ddpsim.trace import Trace

ARCHS = ("resnet50", "bert-large", "gpt2")
ORDERS = ("torch", "reverse", "definition", "ready", "random")
SWEEP_ORDERS = ("torch", "definition", "random")
SWEEP_CAPS = (0.25, 1.0, 4.0, 16.0, 64.0, 256.0)
CAPS = (None, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0)  # None: torch default
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SIM_ITERS = 3  # synced steps per simulation: iteration 0, the rebuild, one steady step
AS_RECORDED = "as recorded"


def gpu_names() -> list[str]:
    return list(gpus())


def network_names() -> list[str]:
    return list(networks())


def network_label(name: str) -> str:
    if name == AS_RECORDED:
        return "as recorded (fitted from the trace)"
    return f"{name}: {networks()[name].get('name', name)}"


@dataclass(frozen=True)
class Base:
    """Where a what-if starts: a workload spec and the options it was run with."""

    kind: str  # "trace" (calibrated from a recorded trace) or "synthetic"
    arch: str = ""
    gpu: str = ""
    network: str = ""
    batch: int | None = None
    config: dict = field(default_factory=dict, hash=False, compare=False)

    @property
    def hardware(self) -> str:
        return f"{self.gpu}-{self.network}"


def base_for(trace: Trace | None) -> Base:
    """The Base of a trace: calibrated from a real one, the synthetic spec of a simulated one."""
    if trace is not None and trace.source == "simulated":
        w = (trace.meta.get("workload") or {})
        if w.get("kind") == "synthetic" and "-" in str(w.get("hardware", "")):
            gpu, _, net = str(w["hardware"]).partition("-")
            cfg = dict(trace.meta.get("config") or {})
            keep = {k: cfg[k] for k in ("world_size", "bucket_cap_mb", "find_unused_parameters",
                                        "no_sync_every", "order") if k in cfg}
            return Base("synthetic", w.get("arch", "resnet50"), gpu, net, w.get("batch"), keep)
    if trace is not None:
        return Base("trace", config=config_from_trace(trace))
    return Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 64})


def workload(base: Base, trace: Trace | None):
    """The simulator's Workload for ``base`` (``trace`` is needed when kind is "trace")."""
    if base.kind == "trace":
        return workload_from_trace(trace)
    return synthetic(base.arch, base.hardware, batch=base.batch)


TIME_LIMIT_S = 20.0  # seconds a page's simulation may run before it stops with a one-line error


def sim_config(base: Base, bucket_cap_mb=None, order="torch", find_unused_parameters=False,
               no_sync_every=1, world_size=None, network=AS_RECORDED, trace_ranks=2) -> SimConfig:
    """A SimConfig for the what-if choices (network applies to calibrated traces as an override)."""
    over = {}
    if base.kind == "trace" and network not in (AS_RECORDED, None, ""):
        prof = networks()[network]
        over = {"bandwidth_gbps": float(prof["bandwidth_gbps"]), "latency_us": float(prof["latency_us"]),
                "concurrency": int(prof.get("concurrency", 1)), "interference": float(prof.get("interference", 0))}
    return SimConfig(world_size=int(world_size or base.config.get("world_size", 2)), iters=SIM_ITERS,
                     bucket_cap_mb=bucket_cap_mb, order=order,
                     find_unused_parameters=bool(find_unused_parameters),
                     no_sync_every=int(no_sync_every), trace_ranks=trace_ranks, time_limit_s=TIME_LIMIT_S, **over)


def run(work, cfg: SimConfig) -> tuple[Trace, dict]:
    """One simulation (a thin call into ddpsim.sim.simulate)."""
    return simulate(work, cfg)


def sweep_rows(work, cfg: SimConfig, caps=SWEEP_CAPS, orders=SWEEP_ORDERS,
               find_unused=(False, True)) -> tuple[list[dict], list[str]]:
    """Iteration time and exposed comm per bucket cap x ordering x find_unused (best marked).

    Rows with ``bucket_cap_mb`` None are torch's default (25 MiB, first bucket 1 MiB).

    Returns (rows, notes); a combination the simulator refuses (e.g. a model with unused
    parameters and find_unused off, which torch fails on) becomes a note, not a row.
    """
    base = SimConfig(**{**asdict(cfg), "trace_ranks": 1})
    rows, notes = [], []
    for fu in find_unused:
        try:
            part = sweep(work, {"bucket_cap_mb": list(caps), "order": list(orders)},
                         SimConfig(**{**asdict(base), "find_unused_parameters": fu}))
        except ValueError as e:
            notes.append(f"find_unused_parameters={fu}: {e}")
            continue
        rows += [{**r, "find_unused_parameters": fu} for r in part]
        for order in orders:  # torch's default cap (25 MiB, first bucket 1 MiB): bucket_cap_mb None
            _, summ = simulate(work, SimConfig(**{**asdict(base), "find_unused_parameters": fu,
                                                  "order": order, "bucket_cap_mb": None}))
            rows.append({"bucket_cap_mb": None, "order": order, "find_unused_parameters": fu,
                         **{m: summ[m] for m in ("iteration_time_s", "exposed_comm_s", "overlap_fraction")},
                         "n_buckets": summ["n_buckets"]})
    if rows:
        best = min(rows, key=lambda r: r["iteration_time_s"])
        for r in rows:
            r["best"] = r is best
    return rows, notes
