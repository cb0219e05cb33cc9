"""``ddpsim selfcheck [--gpu]``: does the recorder work on this machine? Record, check, compare.

With ``--gpu`` (a CUDA machine), each of these is recorded by ``record``'s own launcher:

- NCCL on every visible GPU (one rank per GPU): the zoo's ``transformer`` (no torchvision) and
  ResNet-50 (``ddpsim.models.resnet:resnet50``, the shapes of ``ddpsim.sim.archs``);
- gloo with ``--device cuda`` at 2 ranks (the GPUs shared) on the zoo's ``convnet``;

and each trace is checked (``trace_problems``): the GPU timebase, every iteration complete, every
gradient-ready time inside its backward, every allreduce launched after its bucket's last
gradient and complete by the end of the backward; on the GPU also the iteration torch's own DDP
logger timed, against the recording (``logger_problems``, Note [Torch's logger as a second clock];
on the CPU, where a preemption between two stamps costs milliseconds, it is printed with no bound),
and the forward's GPU start against the host time it was queued (``forward_lags_us``). Then the recorder is compared with torch's
profiler on the same ResNet-50 iterations (``profiler_truth``): the median error of the
per-parameter gradient-ready times and of the bucket allreduce starts and ends must be at most
``TRUTH_MS``. Without ``--gpu`` the same checks run on the CPU with gloo (the zoo's ``convnet``;
the profiler comparison is printed, with no bound: CPU hooks are not GPU kernels).

One line per check (PASS or FAIL and the figures); the last line is one JSON object. Exit
status 1 when a check fails. Recording overhead is measured apart, interleaved:
``benchmarks/bench_gpu_overhead.py``.
"""
from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from ddpsim.errors import CLIError

HELP = "check the recorder on this machine (--gpu: NCCL and CUDA events on the GPUs): record, check, compare with the profiler"
RESNET50 = "ddpsim.models.resnet:resnet50"
TRUTH_MS = 0.1  # ms: the largest median error against the profiler that passes (the GPU acceptance bound)
SLACK_NS = 2_000  # ns: CUDA event times are good to ~0.5 us; order checks allow this much
MAX_LAG_US = 1_000  # us: the most an idle GPU may take to start queued work (a launch is ~5-20 us)
LOGGER_MS = 2.0  # ms: a duration may differ from torch's logger by this much (bundled runs: 1.03 ms at most)
LOGGER_SHARE = 0.1  # or by this share of torch's figure, whichever is larger


def add_arguments(p) -> None:
    p.add_argument("--gpu", action="store_true", help="check the CUDA path (NCCL, gloo --device cuda, CUDA events)")
    p.add_argument("--iters", type=int, default=8, help="iterations per recording (default 8)")
    p.add_argument("--out", help="keep the recordings and profiles in this folder (default: a temporary one)")
    p.add_argument("--skip-truth", action="store_true", help="skip the comparison with torch's profiler")


def cases(gpu: bool, gpus: int, iters: int) -> list[tuple[str, dict]]:
    """(name, RecordConfig fields) of every recording to check."""
    if not gpu:
        return [("gloo cpu convnet x2", dict(model="convnet", world_size=2, backend="gloo", iters=iters))]
    return [(f"nccl transformer x{gpus}", dict(model="transformer", world_size=gpus, backend="nccl", iters=iters)),
            (f"nccl resnet50 x{gpus}", dict(model=RESNET50, world_size=gpus, backend="nccl", iters=iters)),
            ("gloo cuda convnet x2", dict(model="convnet", world_size=2, backend="gloo", device="cuda",
                                          iters=iters))]


def trace_problems(trace, gpu: bool, iters: int) -> list[str]:
    """What is wrong with a recording (empty when it passes); see the module docstring."""
    problems = []
    if gpu and trace.meta.get("timebase", {}).get("grad_ready") != "gpu":
        problems.append(f"timebase is {trace.meta.get('timebase')}, not the GPU's")
    for rank in trace.ranks:
        if not rank.complete or len(rank.iterations) != iters:
            problems.append(f"rank {rank.rank}: {len(rank.iterations)} of {iters} iterations "
                            f"({rank.error or 'incomplete'})")
        for it in rank.iterations:
            problems += _iteration_problems(rank, it)
    return (problems + (logger_problems(trace) if gpu else []))[:8]  # on the CPU printed, with no bound


def logger_difference_ms(trace) -> float | None:
    """The largest difference (ms) between the recording and torch's own DDP logger; None where it timed nothing."""
    from ddpsim.analysis.torch_logger import against_torch_logger, largest_difference

    rows = against_torch_logger(trace)
    return round(largest_difference(rows) * 1e3, 3) if rows else None


def logger_problems(trace) -> list[str]:
    """Where the recording and torch's own DDP logger disagree on the iteration torch timed; a recording
    of torch's DDP must carry its timings for every rank."""
    from ddpsim.analysis.torch_logger import against_torch_logger, disagreements

    rows = against_torch_logger(trace)
    if trace.meta.get("impl") == "torch" and len(rows) != len(trace.ranks):
        return [f"torch's DDP logger timed an iteration on {len(rows)} of {len(trace.ranks)} ranks"]
    return disagreements(rows, LOGGER_MS * 1e-3, LOGGER_SHARE)


def _iteration_problems(rank, it) -> list[str]:
    where = f"rank {rank.rank} iteration {it.iteration}"
    out = []
    bwd = it.backward
    for g in it.grad_ready:
        if not (bwd.start_ns - SLACK_NS <= g.t_ns <= bwd.end_ns + SLACK_NS):
            out.append(f"{where}: parameter {g.param} ready {(g.t_ns - bwd.start_ns) / 1e6:.3f} ms after "
                       f"the backward start, outside the backward ({bwd.duration_ns / 1e6:.3f} ms)")
    for b in it.buckets:  # ready_ns: its last gradient's ready time (RankRecorder.end_iteration)
        if b.launch_ns < b.ready_ns - SLACK_NS:
            out.append(f"{where}: bucket {b.bucket} launched {(b.ready_ns - b.launch_ns) / 1e3:.1f} us before "
                       "its last gradient was ready")
        if not (b.launch_ns <= b.complete_ns + SLACK_NS <= bwd.end_ns + 2 * SLACK_NS):
            out.append(f"{where}: bucket {b.bucket} allreduce {b.launch_ns}..{b.complete_ns} ns is not "
                       f"inside the backward (ends {bwd.end_ns})")
    if it.sync and not it.buckets:
        out.append(f"{where}: a synced iteration without an allreduce")
    return out


def forward_lags_us(raw: dict) -> list[tuple[float, float]]:
    """Per iteration, the forward's GPU start minus the host time it was queued (us), from a
    recording's ``cpu_spans``, with the half-width of the iteration's clock anchor (us; 0 in a
    recording without ``anchor_window_ns``): a check of the CUDA-event-to-host mapping (Note [Host
    clock alignment] in ``ddpsim.record.gpuclock``). The GPU is idle there (the anchor has just
    synchronised), so a right mapping gives a small lag, never one below minus that uncertainty."""
    return [((it["forward"]["start_ns"] - it["cpu_spans"]["forward"]["start_ns"]) / 1e3,
             it.get("anchor_window_ns", 0) / 2e3)
            for rank in raw["ranks"] for it in rank["iterations"] if "cpu_spans" in it]


def lag_problems(lags: list[tuple[float, float]]) -> list[str]:
    """What is wrong with ``forward_lags_us``: a GPU start before its host queue time by more than
    the clock mapping's uncertainty (plus SLACK_NS), or a median lag above MAX_LAG_US."""
    if not lags:
        return ["no CPU times beside the GPU times (cpu_spans)"]
    out = []
    worst = min(lags, key=lambda lw: lw[0] + lw[1])
    if worst[0] + worst[1] < -SLACK_NS / 1e3:
        out.append(f"the forward's GPU start precedes its host queue time by {-worst[0]:.1f} us, more than "
                   f"the host/GPU clock mapping's uncertainty ({worst[1]:.1f} us)")
    median = statistics.median(lag for lag, _ in lags)
    if median > MAX_LAG_US:
        out.append(f"the forward starts {median:.0f} us after it was queued on an idle GPU")
    return out


def environment(gpu: bool) -> dict:
    import torch

    env = {"torch": torch.__version__, "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if gpu:
        if not torch.cuda.is_available():
            raise CLIError("selfcheck --gpu needs CUDA, but torch.cuda.is_available() is False here "
                           "(run `ddpsim selfcheck` for the CPU checks)")
        env.update(gpus=torch.cuda.device_count(), gpu=torch.cuda.get_device_name(0),
                   nccl=".".join(map(str, torch.cuda.nccl.version())))
    return env


def record_and_check(name: str, fields: dict, folder: Path, gpu: bool) -> dict:
    from ddpsim.analysis import summarize
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record

    cfg = RecordConfig(**fields).validate()
    t0 = time.perf_counter()
    trace_path = folder / (name.replace(" ", "_") + ".json")
    trace = record(cfg, trace_path)
    problems = trace_problems(trace, gpu, cfg.iters)
    lags = []
    if gpu:  # cpu_spans are not in the Trace classes: read from the file record wrote
        lags = forward_lags_us(json.loads(trace_path.read_text()))
        problems += lag_problems(lags)
    return {"check": name, "ok": not problems, "problems": problems, "seconds": round(time.perf_counter() - t0, 1),
            "forward_lag_us": round(statistics.median(lag for lag, _ in lags), 1) if lags else None,
            "iteration_ms": round(summarize(trace)["iteration_time_s"] * 1e3, 2),
            "torch_logger_ms": logger_difference_ms(trace),
            "buckets": len(trace.ranks[0].iterations[-1].buckets) if trace.ranks[0].iterations else 0}


def truth_check(gpu: bool, gpus: int, folder: Path) -> dict:
    from ddpsim.experiments import profiler_truth
    from ddpsim.record.config import RecordConfig

    fields = (dict(model=RESNET50, world_size=gpus, backend="nccl") if gpu
              else dict(model="convnet", world_size=2, backend="gloo"))
    cfg = RecordConfig(**fields).validate()
    res = profiler_truth.check(cfg, folder / "truth")
    # the allreduce medians count unless every allreduce ran no kernel (Note [No kernel, no truth]);
    # with none compared and none left out, their None fails the check
    unmeasurable = res["allreduce_no_kernel"] and not res["allreduce_start"]["n"]
    compared = ["grad_ready"] + ([] if unmeasurable else ["allreduce_start", "allreduce_end"])
    medians = [res[k]["median_abs_ms"] for k in compared]
    ok = not res["problems"] and None not in medians and (not gpu or max(medians) <= TRUTH_MS)
    name = f"profiler truth {fields['model'].split(':')[-1]} x{cfg.world_size}"
    return {"check": name, "ok": ok, **res}


def line(row: dict) -> str:
    status = "PASS" if row["ok"] else "FAIL"
    if "grad_ready" in row:
        figs = ", ".join(f"{k} median {row[k]['median_abs_ms']:.3f} ms max {row[k]['max_abs_ms']:.3f} ms "
                         f"(n={row[k]['n']})" for k in ("grad_ready", "allreduce_start", "allreduce_end")
                         if row[k]["n"])
        figs += f"; clock offset spread {row['offset_spread_ms']:.3f} ms"
        if row["allreduce_no_kernel"]:  # Note [No kernel, no truth] in profiler_truth.py
            figs += (f"; {row['allreduce_no_kernel']} allreduces ran no GPU kernel (NCCL at one rank), "
                     "so their times are not compared")
    else:
        figs = f"{row['iteration_ms']:.2f} ms/iteration, {row['buckets']} buckets, {row['seconds']} s"
        if row.get("torch_logger_ms") is not None:
            figs += f", torch's own DDP logger agrees within {row['torch_logger_ms']:.2f} ms"
        if row.get("forward_lag_us") is not None:
            figs += f", queued-to-GPU lag at the forward's start {row['forward_lag_us']:.1f} us (median)"
    return f"{status} {row['check']}: {figs}" + "".join(f"\n     {p}" for p in row["problems"])


def main(args) -> int:
    from ddpsim.trace.writer import refuse_empty

    refuse_empty(args.out, "--out", "a folder name")
    if not 2 <= args.iters <= 1000:
        raise CLIError(f"--iters must be between 2 and 1000, not {args.iters}")
    env = environment(args.gpu)
    print("selfcheck: " + ", ".join(f"{k} {v}" for k, v in env.items()), flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddpsim-selfcheck-") as tmp:
        folder = Path(tmp if args.out is None else args.out)
        folder.mkdir(parents=True, exist_ok=True)
        todo = [(n, lambda n=n, f=f: record_and_check(n, f, folder, args.gpu))
                for n, f in cases(args.gpu, env.get("gpus", 0), args.iters)]
        if not args.skip_truth:
            todo.append(("profiler truth", lambda: truth_check(args.gpu, env.get("gpus", 0), folder)))
        for name, step in todo:
            try:
                rows.append(step())
            except Exception as e:  # noqa: BLE001 - one failing check is reported, the rest still run
                rows.append({"check": name, "ok": False, "iteration_ms": 0, "buckets": 0, "seconds": 0,
                             "problems": [f"{type(e).__name__}: {str(e).strip()[:300]}"]})
            print(line(rows[-1]), flush=True)
    ok = all(r["ok"] for r in rows)
    print(f"selfcheck: {sum(r['ok'] for r in rows)} of {len(rows)} checks passed")
    print(json.dumps({"environment": env, "ok": ok, "checks": rows}))
    return 0 if ok else 1
