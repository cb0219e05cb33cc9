"""The recorder against torch's profiler on the same iterations (``ddpsim selfcheck``).

Each rank trains as ``record`` does (``ddpsim.record.worker.Run``: the grad-ready hooks, the
recording comm hook, CUDA events on a GPU) and, after ``WARMUP`` iterations, runs the next
ones inside ``torch.profiler.profile`` (CPU and CUDA activities, ``record_shapes``). The profile
is read by ``ddpsim import`` (``ddpsim.trace.profile_import``), which takes every time from the
profiler's own GPU kernels, not from the recorder. The two traces are then compared iteration by
iteration:

- gradient ready: the k-th gradient the recorder saw against the importer's k-th
  ``AccumulateGrad`` (their shapes must agree), each ``t_ns``;
- bucket allreduce: each bucket's launch and completion against the collective's GPU span.

Note [No kernel, no truth]: NCCL with one rank runs no kernel for an allreduce, and the importer
then places a zero-length collective at the bucket's ready time (``profile_import``). That is no
measurement of the allreduce: against it, the recorder's launch (an event after DDP has copied the
bucket and the hook has divided it) is "late" by exactly that copy and divide, 10 to 110 us for
ResNet-50's buckets on an H200. At one rank such collectives are left out of the comparison and
counted (``allreduce_no_kernel``): on one GPU the allreduce times go unchecked. With more ranks a
collective without a kernel is a problem of the profile, and reported.

Note [One clock offset per rank]: the importer moves its times to start at 0, and Kineto's clock
is not ``perf_counter_ns``. Both traces end each iteration's optimizer span when the GPU has
finished the optimizer's last kernel (the recorder: a CUDA event queued after ``zero_grad``; the
importer: the end of the GPU work launched before ``zero_grad`` returned), one instant on two
clocks. One offset per rank, the median over the compared iterations of their difference, puts
the importer's times on the recorder's clock; the errors are then measured on other events (the
backward's gradients and allreduces, before the optimizer). The offsets' spread is reported: a
large one would mean iterations paired wrongly. (An offset taken at the forward's start instead
is a CPU instant, ``DistributedDataParallel.forward``'s, which on an H200 under the profiler lay
1.3 ms from the recorder's, with 0.46 ms of spread: too coarse for a 0.1 ms bound.)
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import tempfile
from pathlib import Path

WARMUP = 4  # iterations before the profiler starts (the bucket rebuild, cuDNN autotuning)
PROFILED = 8  # iterations compared


def _profiled_rank(rank: int, world: int, cfg_dict: dict, folder: str, backend: str, device_type: str) -> None:
    """One rank: the recorder's Run, the last PROFILED iterations under torch.profiler."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    from ddpsim.events import RankRecorder
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.meta import rank_header
    from ddpsim.record.process import init_process_group
    from ddpsim.record.worker import Run

    torch.set_num_threads(1)
    cfg = RecordConfig(**cfg_dict)
    device = torch.device("cpu")
    if device_type == "cuda":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    os.environ["DDPSIM_STORE"] = str(Path(folder) / "store")  # a FileStore: no port opened
    init_process_group(backend, rank, world, cfg.timeout_s)
    rec = RankRecorder(Path(folder) / f"run.json.rank{rank}.jsonl", rank, rank_header(cfg, backend, world))
    run = Run(cfg, rank, world, device, rec)
    for it in range(WARMUP):
        run.step(it)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    out = str(Path(folder) / f"profile_rank{rank}.json")
    with profile(activities=activities, record_shapes=True,
                 schedule=schedule(wait=0, warmup=1, active=PROFILED, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(out)) as prof:
        for it in range(WARMUP, WARMUP + PROFILED + 1):  # the first is the profiler's own warm-up
            run.step(it)
            prof.step()
    rec.finish(run.logging_data())
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def profiled_recording(cfg, folder: str | Path):
    """Run ``cfg`` (a RecordConfig) with the profiler on; returns (recorded Trace, imported Trace)."""
    import torch.multiprocessing as mp

    from ddpsim.record.merge import merge_files
    from ddpsim.trace.profile_import import import_profiles

    folder = Path(folder)
    placement = cfg.placement()
    cfg = dataclasses.replace(cfg, iters=WARMUP + PROFILED + 1)  # the caller's config stays as it was
    mp.start_processes(_profiled_rank, nprocs=cfg.world_size, start_method="spawn",
                       args=(cfg.world_size, cfg.to_dict(), str(folder), placement.backend, placement.device))
    shards = [folder / f"run.json.rank{r}.jsonl" for r in range(cfg.world_size)]
    recorded = merge_files(shards, folder / "run.json")
    imported = import_profiles([folder / f"profile_rank{r}.json" for r in range(cfg.world_size)])
    return recorded, imported


def _pairs(recorded_rank, imported_rank):
    """(recorded, imported) iterations: the imported ones are the last profiled steps, in order."""
    window = [it for it in recorded_rank.iterations if it.iteration > WARMUP]
    imported = sorted(imported_rank.iterations, key=lambda it: it.iteration)[-len(window):]
    return list(zip(window[-len(imported):], imported))


def _ms(ns: float) -> float:
    return ns / 1e6


def compare(recorded, imported) -> dict:
    """Errors (ms) of the recorder against the profiler: ready times, bucket starts and ends."""
    errors = {"grad_ready": [], "allreduce_start": [], "allreduce_end": []}
    offsets_spread, problems, no_kernel = [], [], 0
    shapes_rec = {p.index: p.shape for p in recorded.params}
    shapes_imp = {p.index: p.shape for p in imported.params}
    for rec_rank in recorded.ranks:
        imp_rank = next((r for r in imported.ranks if r.rank == rec_rank.rank), None)
        pairs = _pairs(rec_rank, imp_rank) if imp_rank else []
        if not pairs:
            problems.append(f"rank {rec_rank.rank}: no profiled iteration to compare")
            continue
        diffs = [a.optimizer.end_ns - b.optimizer.end_ns for a, b in pairs if a.optimizer and b.optimizer]
        if not diffs:
            problems.append(f"rank {rec_rank.rank}: no optimizer span to align the clocks on")
            continue
        offset = statistics.median(diffs)  # Note [One clock offset per rank]
        offsets_spread.append(_ms(max(diffs) - min(diffs)))
        for a, b in pairs:
            if len(a.grad_ready) != len(b.grad_ready):
                problems.append(f"rank {rec_rank.rank} iteration {a.iteration}: {len(a.grad_ready)} "
                                f"gradients recorded, {len(b.grad_ready)} in the profile")
            for ga, gb in zip(a.grad_ready, b.grad_ready):
                if shapes_rec.get(ga.param) != shapes_imp.get(gb.param):
                    problems.append(f"rank {rec_rank.rank} iteration {a.iteration}: gradient shapes "
                                    f"differ ({shapes_rec.get(ga.param)} vs {shapes_imp.get(gb.param)})")
                    break
                errors["grad_ready"].append(_ms(ga.t_ns - gb.t_ns - offset))
            imp_b = {e.bucket: e for e in b.buckets}
            for e in a.buckets:
                if e.bucket not in imp_b:
                    problems.append(f"rank {rec_rank.rank} iteration {a.iteration}: bucket {e.bucket} "
                                    "has no allreduce in the profile")
                    continue
                if imp_b[e.bucket].complete_ns == imp_b[e.bucket].launch_ns:  # Note [No kernel, no truth]
                    if recorded.meta.get("world_size") == 1:
                        no_kernel += 1
                    else:  # several ranks always run a kernel: the profile lost it
                        problems.append(f"rank {rec_rank.rank} iteration {a.iteration}: bucket {e.bucket}'s "
                                        "allreduce has no GPU kernel in the profile")
                    continue
                errors["allreduce_start"].append(_ms(e.launch_ns - imp_b[e.bucket].launch_ns - offset))
                errors["allreduce_end"].append(_ms(e.complete_ns - imp_b[e.bucket].complete_ns - offset))
    out = {"problems": sorted(set(problems))[:5], "offset_spread_ms": max(offsets_spread, default=None),
           "allreduce_no_kernel": no_kernel}
    for name, errs in errors.items():
        absolute = sorted(abs(x) for x in errs)
        out[name] = {"n": len(errs), "median_abs_ms": statistics.median(absolute) if errs else None,
                     "max_abs_ms": absolute[-1] if errs else None,
                     "median_signed_ms": statistics.median(errs) if errs else None}
    return out


def check(cfg, keep: str | Path | None = None) -> dict:
    """Profile and record ``cfg`` together and compare; the files stay in ``keep`` if given."""
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
    with contextlib.nullcontext(keep) if keep else tempfile.TemporaryDirectory(prefix="ddpsim-truth-") as folder:
        return compare(*profiled_recording(cfg, folder))
