"""``ddpsim gpucheck [DIR]``: the GPU model against real H100 runs (``ddpsim/samples/h100/``).

For each model with a Kineto profile and a ``*.truth.json`` in DIR (ResNet-50 and ViT-B/16 at
1 rank with NCCL, ResNet-18 at 2 ranks with gloo): import the profile (``ddpsim import``), learn
the workload from its GPU kernels (``learn.extract.workload_from_trace``), simulate the recorded
run (``sim.simulate``, the recorded options) and compare with the CUDA events of the same
iterations in the truth file, a measurement the workload was not taken from:

- backward: ``gpu_backward_ms_to_last_enqueued`` (a CUDA event before ``backward()`` to one after
  it returns) against the simulated backward span;
- every parameter's gradient-ready time after the backward start (a CUDA event recorded in its
  ``post_accumulate_grad`` hook) against the simulated one. A profile has no parameter names, so
  the imported parameter at ready position k (``param{n-1-k}``, Note in ``profile_import``) is the
  k-th parameter of the truth's ready order; their shapes are checked to match.

Errors are ``(simulated - measured) / measured``; per model the table gives the backward error
and the median and 90th percentile |error| of the ready times (each the median over the
iterations). The last stdout line is one JSON object.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path

from ddpsim.samples import H100_DIR

HELP = "check the GPU model on real H100 traces: simulated vs CUDA-event backward and gradient-ready times"
DEFAULT_DIR = H100_DIR  # the runs bundled with ddpsim
# model -> (profiles, truth files), one per rank, in DIR (ddpsim/samples/h100/README.md)
CASES = {
    "resnet50": (["resnet50_nccl_ws1_rank0.kineto.json.gz"], ["resnet50_nccl_ws1_rank0.truth.json"]),
    "vit_b_16": (["vit_b_16_nccl_ws1_rank0.kineto.json.gz"], ["vit_b_16_nccl_ws1_rank0.truth.json"]),
    "resnet18-gloo-ws2": ([f"resnet18_gloo_ws2_rank{r}.kineto.json.gz" for r in (0, 1)],
                          [f"resnet18_gloo_ws2_rank{r}.truth.json" for r in (0, 1)]),
}
MIN_READY_MS = 0.05  # ready times earlier than this after the backward start are not compared (relative error of ~0)


def add_arguments(p) -> None:
    p.add_argument("dir", nargs="?", default=DEFAULT_DIR,
                   help="folder with the Kineto profiles and *.truth.json files (default: the H100 runs "
                        "bundled with ddpsim, ddpsim/samples/h100)")
    p.add_argument("--models", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--iters", type=int, default=6, help="synced steps to simulate (default 6)")
    p.add_argument("--json", help="also write the rows (with every parameter's ready time) to this JSON file")


def _med(xs):
    return statistics.median(xs)


def measured(truth: dict, iterations: set[int]) -> tuple[float, dict[int, float], list[dict]]:
    """(backward ms, {ready position: ms after backward start}, the params in ready order) from a
    truth file's iterations ``iterations`` (medians)."""
    its = [it for it in truth["iterations"] if it["iteration"] in iterations]
    if not its:
        raise ValueError(f"the truth file has none of the profiled iterations {sorted(iterations)}")
    order = [g["param"] for g in its[0]["grad_ready"]]
    by_param = {g["param"]: [] for g in its[0]["grad_ready"]}
    for it in its:
        for g in it["grad_ready"]:
            by_param.setdefault(g["param"], []).append(g["gpu_ms_after_backward_start"])
    shapes = {p["index"]: p for p in truth["params"]}
    ready = {k: _med(by_param[p]) for k, p in enumerate(order)}
    return _med(it["gpu_backward_ms_to_last_enqueued"] for it in its), ready, [shapes[p] for p in order]


def simulated(sim, rank: int) -> tuple[float, dict[int, float]]:
    """(backward ms, {param index: ready ms after backward start}) of one simulated rank (medians
    over its synced iterations after the first)."""
    r = next((x for x in sim.ranks if x.rank == rank), sim.ranks[0])
    its = [it for it in r.iterations if it.sync][1:] or r.iterations
    ready: dict[int, list[float]] = {}
    for it in its:
        for g in it.grad_ready:
            ready.setdefault(g.param, []).append((g.t_ns - it.backward.start_ns) / 1e6)
    return _med(it.backward.duration_ns / 1e6 for it in its), {p: _med(v) for p, v in ready.items()}


def check_case(folder: Path, name: str, iters: int = 6) -> dict:
    """One model: import, learn, simulate, compare (see the module docstring)."""
    from ddpsim.learn.extract import replay_config, workload_from_trace
    from ddpsim.trace.profile_import import import_profiles
    from ddpsim.sim.api import simulate

    profiles, truths = CASES[name]
    trace = import_profiles([folder / f for f in profiles])
    w = workload_from_trace(trace)
    sim, _ = simulate(w, replay_config(w, trace, iters=iters, jitter=0.0))
    n = len(trace.params)
    rows = []
    for rank, tf in enumerate(truths):
        truth = json.loads((folder / tf).read_text())
        its = {it.iteration for it in trace.ranks[rank].iterations}
        bwd_meas, ready_meas, order = measured(truth, its)
        bwd_sim, ready_sim = simulated(sim, rank)
        errs = []
        for k, p in enumerate(order):
            imported = trace.params[n - 1 - k] if k < n else None
            if imported is None or list(imported.shape) != list(p["shape"]):
                raise ValueError(f"{name}: ready position {k} is {p['name']} {p['shape']} in the truth but "
                                 f"{imported and imported.shape} in the profile")
            meas, pred = ready_meas[k], ready_sim.get(imported.index)
            if pred is not None and meas >= MIN_READY_MS:
                errs.append({"param": p["name"], "measured_ms": meas, "simulated_ms": pred,
                             "rel_error": (pred - meas) / meas})
        abs_errs = sorted(abs(e["rel_error"]) for e in errs)
        rows.append({"model": name, "rank": rank, "world_size": trace.world_size,
                     "backward_measured_ms": bwd_meas, "backward_simulated_ms": bwd_sim,
                     "backward_rel_error": (bwd_sim - bwd_meas) / bwd_meas,
                     "ready_params": len(errs), "ready_median_abs_error": _med(abs_errs),
                     "ready_p90_abs_error": abs_errs[int(0.9 * (len(abs_errs) - 1))],
                     "iterations": sorted(its), "ready": errs})
    return {"model": name, "rows": rows}


def run(folder: str | Path, models: list[str], iters: int = 6) -> list[dict]:
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder} is not a folder (want the GPU traces, e.g. {DEFAULT_DIR})")
    unknown = [m for m in models if m not in CASES]
    if not models:  # an empty table, exit 0
        raise ValueError(f"--models names no model: choose from {', '.join(CASES)}")
    if unknown:
        raise ValueError(f"unknown model {unknown[0]!r}: choose from {', '.join(CASES)}")
    out = []
    for m in models:
        missing = [f for f in sum(CASES[m], []) if not (folder / f).is_file()]
        if missing:
            raise ValueError(f"{folder} lacks {missing[0]} (for {m})")
        out += check_case(folder, m, iters)["rows"]
    return out


def table(rows: list[dict]) -> str:
    head = (f"{'model':20} {'rank':>4} {'bwd meas ms':>11} {'bwd sim ms':>10} {'bwd err':>8} "
            f"{'params':>6} {'ready med|err|':>14} {'ready p90|err|':>14}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['model']:20} {r['rank']:>4} {r['backward_measured_ms']:>11.2f} "
                     f"{r['backward_simulated_ms']:>10.2f} {r['backward_rel_error'] * 100:>+7.1f}% "
                     f"{r['ready_params']:>6} {r['ready_median_abs_error'] * 100:>13.1f}% "
                     f"{r['ready_p90_abs_error'] * 100:>13.1f}%")
    return "\n".join(lines)


def main(args) -> int:
    from ddpsim.trace.writer import refuse_empty, refuse_unwritable, write_text

    refuse_empty(getattr(args, "json", None), "--json")
    if getattr(args, "json", None):  # before the work: it printed its table, then failed
        refuse_unwritable(args.json, "--json")
    rows = run(args.dir, [m for m in args.models.split(",") if m], args.iters)
    print(table(rows))
    if getattr(args, "json", None):
        write_text(json.dumps({"rows": rows}, indent=1), args.json)  # whole or not at all
    print(json.dumps([{k: v for k, v in r.items() if k != "ready"} for r in rows], separators=(",", ":")))
    return 0
