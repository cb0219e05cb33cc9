"""The ladder from naive data parallelism to torch's DDP, measured and simulated.

Four rungs, each adding one idea of torch's DDP (Li et al., VLDB 2020):

==========  ====================================  =============================================
rung        ddpsim implementation                 what it adds
==========  ====================================  =============================================
naive       ``NaiveDDP`` (--impl naive)            allreduce every gradient after backward
overlap     ``OverlapDDP`` (--impl overlap)        launch each allreduce from its gradient's hook
bucketed    minddp, fixed buckets (--order         pack gradients into capped buckets, launched
            reverse)                               in order
torch       torch's ``DistributedDataParallel``    one bucket in iteration 0, then buckets rebuilt
                                                   in gradient-ready order, small first bucket
==========  ====================================  =============================================

``python -m ddpsim ladder`` records the four rungs in the same ranks, taking turns
iteration by iteration (``record_many``), so that a slow spell of the machine hits every
rung alike, and prints each rung's iteration time and exposed communication (median
and interquartile range over steady iterations), measured and simulated: *replayed*
(each rung from its own recording) and *predicted* (all four rungs from the torch
rung's recording alone, learnt as ``validate --grid`` learns its calibration run).
"""
from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

from ddpsim.analysis import cycle_metrics, steady_cycles
from ddpsim.trace import Trace

HELP = "record the ladder naive -> overlap -> bucketed -> torch's DDP interleaved, and simulate it"


@dataclass(frozen=True)
class Rung:
    name: str
    label: str
    record: dict  # RecordConfig fields
    simulate: dict  # SimConfig fields


RUNGS = (
    Rung("naive", "naive: allreduce per parameter after backward", {"impl": "naive"}, {"naive": True}),
    Rung("overlap", "overlap: allreduce per parameter from its hook", {"impl": "overlap"}, {"overlap": True}),
    Rung("bucketed", "bucketed: capped buckets in fixed order", {"impl": "minddp", "order": "reverse"},
         {"order": "reverse"}),
    Rung("torch", "torch: rebuilt in gradient-ready order", {"impl": "torch"}, {}),
)


def spread(values: list[float]) -> dict:
    """Median and interquartile range (p25, p75) of ``values``."""
    xs = sorted(values)
    if len(xs) < 2:
        return {"median": xs[0], "p25": xs[0], "p75": xs[0]}
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return {"median": statistics.median(xs), "p25": q[0], "p75": q[2]}


def rung_row(rung: str, trace: Trace, source: str) -> dict:
    """One table row: iteration time and exposed communication over steady cycles (ms)."""
    rows = [cycle_metrics(trace, c) for c in steady_cycles(trace)]
    return {"rung": rung, "source": source, "n": len(rows),
            "iteration_ms": spread([r["iteration_time_s"] * 1e3 for r in rows]),
            "exposed_ms": spread([r["exposed_comm_s"] * 1e3 for r in rows]),
            "overlap": statistics.median(r["overlap_fraction"] for r in rows)}


def simulate_rungs(traces: dict[str, Trace], iters: int, seed: int = 0, learn_from: str = "torch") -> dict[str, Trace]:
    """Each rung simulated from a workload learnt from a recording.

    ``learn_from="torch"``: one workload, learnt as ``validate --grid`` learns its
    calibration run (the torch rung's allreduce line timed in its own ranks between
    rounds, Note [Calibrate in the recording's ranks]; then Note [Self-calibration]),
    predicts all four rungs, three of them from runs the simulator never saw.
    ``"own"``: each rung replays its own recording.
    """
    from ddpsim.learn import simulate
    from ddpsim.learn.extract import replay_config, workload_from_trace
    from ddpsim.experiments.grid import attach_calibration
    from ddpsim.learn.jitter import pick_jitter
    from ddpsim.learn.refine import refine

    out, learnt = {}, None
    for rung in RUNGS:
        source = traces["torch" if learn_from == "torch" else rung.name]
        if learn_from != "torch":
            w = workload_from_trace(source)
        elif learnt is None:
            if source.meta.get("allreduce_probe"):
                attach_calibration(source, source.world_size, {})
                w = learnt = refine(workload_from_trace(source), source, iters, noise="drawn")
            else:
                w = learnt = workload_from_trace(source)
        cfg = replay_config(w, source, iters=iters, seed=seed,
                            jitter=pick_jitter(None, w, source, iters), **rung.simulate)
        out[rung.name], _ = simulate(w, cfg)
    return out


def ladder_table(measured: dict[str, Trace], simulated: dict[str, Trace] | None = None,
                 **more: dict[str, Trace]) -> list[dict]:
    """Rows for every rung: measured, then each simulation (``simulated``, then the
    keyword ones, e.g. ``replayed=..., predicted=...``; the keyword is the row's source)."""
    sources = {"measured": measured, "simulated": simulated or {}, **more}
    return [rung_row(rung.name, traces[rung.name], source)
            for rung in RUNGS for source, traces in sources.items() if rung.name in traces]


def rung_of(trace: Trace) -> str | None:
    """Which rung a real or simulated trace stands on (None: none of them).

    minddp with torch's order counts as the torch rung: it is torch's algorithm.
    """
    if trace.source == "real":
        impl, order = trace.meta.get("impl"), (trace.meta.get("config") or {}).get("order")
        if impl in ("naive", "overlap"):
            return impl
        if impl == "minddp":
            return "bucketed" if order in ("reverse", "definition") else "torch"
        return "torch" if impl == "torch" else None
    cfg = trace.meta.get("config") or {}
    if cfg.get("naive") or cfg.get("overlap"):
        return "naive" if cfg.get("naive") else "overlap"
    return "bucketed" if cfg.get("order") in ("reverse", "definition") else "torch"


def rows_for_runs(runs: list[tuple[str, Trace]]) -> list[dict]:
    """Ladder rows for the runs a user picked (the first run of each rung and source), in rung order.

    For the Compare page: the runs need not come from one ``ladder`` recording, so their
    timings are comparable only if they were recorded side by side.
    """
    seen: dict[tuple[str, str], dict] = {}
    for _label, trace in runs:
        rung = rung_of(trace)
        source = "measured" if trace.source == "real" else "simulated"
        if rung is not None and (rung, source) not in seen:
            seen[(rung, source)] = rung_row(rung, trace, source)
    return [seen[(r.name, s)] for r in RUNGS for s in ("measured", "simulated") if (r.name, s) in seen]


def format_table(rows: list[dict]) -> str:
    """A plain-text table: median [p25-p75] in ms."""
    def cell(s):
        return f"{s['median']:7.1f} [{s['p25']:.1f}-{s['p75']:.1f}]"
    lines = [f"{'rung':<9} {'source':<10} {'n':>3}  {'iteration ms [IQR]':<22} {'exposed comm ms [IQR]':<22} overlap"]
    for r in rows:
        lines.append(f"{r['rung']:<9} {r['source']:<10} {r['n']:>3}  {cell(r['iteration_ms']):<22} "
                     f"{cell(r['exposed_ms']):<22} {r['overlap']:.0%}")
    return "\n".join(lines)


def record_ladder(model: str, world_size: int, iters: int, out_dir: Path, bucket_cap_mb=None,
                  progress=None) -> dict[str, Trace]:
    """Record the four rungs interleaved in the same ranks; one trace per rung in ``out_dir``."""
    from ddpsim.record.launcher import record_many

    cfgs = rung_configs(model, world_size, iters, bucket_cap_mb)
    traces = record_many(cfgs, [Path(out_dir) / f"ladder_{r.name}.json" for r in RUNGS], progress=progress)
    return {r.name: t for r, t in zip(RUNGS, traces)}


def rung_configs(model: str, world_size: int, iters: int, bucket_cap_mb=None) -> list:
    """The four rungs' RecordConfigs, in ``RUNGS`` order."""
    from ddpsim.experiments.recorder import CAL_SIZES
    from ddpsim.record.config import RecordConfig

    return [RecordConfig(model=model, world_size=world_size, iters=iters, bucket_cap_mb=bucket_cap_mb,
                         profile_internals=False, **r.record,
                         probe_allreduce_bytes=CAL_SIZES if r.name == "torch" else None) for r in RUNGS]


def add_arguments(p) -> None:
    p.add_argument("--model", default="mlp", help="zoo model or path/to/file.py:factory")
    p.add_argument("--world-size", type=int, default=2, help="ranks (processes)")
    p.add_argument("--iters", type=int, default=12, help="iterations per rung (the first ones are warm-up)")
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="bucket cap in MiB for the bucketed rungs (default: torch's)")
    p.add_argument("--sim-iters", type=int, default=20, help="iterations simulated per rung")
    p.add_argument("--out-dir", default="ladder", help="folder for the four traces")
    p.add_argument("--simulate", default="both", choices=("both", "predicted", "replayed"),
                   help="predicted: every rung from the torch rung's recording alone; replayed: each "
                        "rung from its own recording; both (default)")


def check_flags(args) -> None:
    """The ladder's own flags checked before the first rung is recorded, one line naming the flag: the
    simulator's range for --sim-iters would otherwise stop the command after the recording."""
    from ddpsim.errors import CLIError
    from ddpsim.sim.budget import LIMITS, _num
    from ddpsim.trace.writer import refuse_empty, refuse_unwritable

    if args.iters < 3:
        raise CLIError(f"--iters must be >= 3 (warm-up, rebuild, steady), not {args.iters}")
    lo, hi, unit = LIMITS["iters"]
    if not lo <= args.sim_iters <= hi:
        raise CLIError(f"--sim-iters must be between {_num(lo)} and {_num(hi)} {unit}, not {args.sim_iters}")
    refuse_empty(args.out_dir, "--out-dir", "a folder name")
    refuse_unwritable(Path(args.out_dir) / f"ladder_{RUNGS[0].name}.json", "--out-dir", args.out_dir)
    rungs = zip(RUNGS, rung_configs(args.model, args.world_size, args.iters, args.bucket_cap_mb))
    for rung, cfg in sorted(rungs, key=lambda rc: rc[0].name != "torch"):  # torch's first: the flags as given
        try:  # what the recorder would refuse, before the line that says the recording starts
            cfg.validate()
        except ValueError as e:
            raise CLIError(f"{e}{'' if rung.name == 'torch' else f' (the {rung.name} rung)'}") from None


def main(args) -> int:
    check_flags(args)  # all of them before anything is recorded
    print(f"recording {len(RUNGS)} rungs of {args.model} on {args.world_size} ranks, interleaved, "
          f"{args.iters} iterations each ...", file=sys.stderr, flush=True)
    measured = record_ladder(args.model, args.world_size, args.iters, Path(args.out_dir), args.bucket_cap_mb)
    sims = {}
    if args.simulate in ("both", "replayed"):
        sims["replayed"] = simulate_rungs(measured, args.sim_iters, learn_from="own")
    if args.simulate in ("both", "predicted"):
        sims["predicted"] = simulate_rungs(measured, args.sim_iters, learn_from="torch")
    print(format_table(ladder_table(measured, **sims)))
    print(f"traces: {Path(args.out_dir)}/ladder_<rung>.json. replayed: each rung simulated from its own "
          "recording; predicted: every rung from ladder_torch.json alone (its allreduce line timed in "
          "its ranks between rounds)")
    return 0
