"""What does recording cost on a GPU? Plain torch DDP vs ``ddpsim record``'s instrumented DDP, interleaved.

Needs CUDA (one GPU per rank, NCCL). Each rank holds two DDP wrappers over two identical copies
of the model and steps them A, B, A, B, ... so drift and noise hit both alike:
- plain: forward, backward, optimizer step (what a training loop does);
- recorded: ``ddpsim.record.worker.Run.step`` (grad-ready hooks with CUDA events, the recording
  comm hook, the per-iteration host/GPU anchor and event resolution, the shard line).
Each step is timed from its start to ``torch.cuda.synchronize()`` after it; the batch is made and
copied to the GPU before the timer starts, for both (drawing synthetic ResNet-50 images on the CPU
would otherwise count as the recorder's overhead).

    python benchmarks/bench_gpu_overhead.py [--model transformer] [--pairs 40] [--world-size N]
    python benchmarks/bench_gpu_overhead.py --model path/to/resnet.py:make   # e.g. torchvision

Goal: recorded / plain <= 1.05 (median of the per-pair ratios, with the spread).

``--parts`` adds two more wrappers to the rotation, to tell where the recorder's cost lies: plain
DDP with an empty Python post-accumulate-grad hook on every parameter (what calling Python from
the autograd thread costs), and plain DDP with torch's own Python allreduce comm hook in place of
the built-in C++ one (``default_hooks.allreduce_hook``). Each is reported against plain.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddpsim.models import build_workload, call_batch  # noqa: E402
from ddpsim.record.config import RecordConfig  # noqa: E402
from ddpsim.record.placement import visible_gpus  # noqa: E402
from ddpsim.events import RankRecorder  # noqa: E402
from ddpsim.record.launcher import pick_port  # noqa: E402
from ddpsim.record.worker import Run  # noqa: E402


def plain_step(ddp, opt, workload, it, rank, world, device, batch):
    inputs, target = call_batch(workload, it, rank, world, batch)
    inputs, target = tuple(x.to(device) for x in inputs), target.to(device)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    workload.loss(ddp(*inputs), target).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def recorded_step(run: Run, it: int):
    batch = run.batch(it)  # made outside the timed step, as for the plain step
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    run.step(it, batch)  # ends with the events resolved (a synchronize of the recorded events)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


PARTS = ("python grad hooks", "python comm hook")  # --parts: plain DDP with one piece of the recorder's way


def plain_wrapper(model, device, rank, group, lr, part=None, seed=0):
    """(plain DDP, its SGD, its workload); ``part``: with empty Python grad hooks, or with torch's Python
    allreduce comm hook in place of the built-in one."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    torch.manual_seed(seed)
    w = build_workload(model)
    ddp = torch.nn.parallel.DistributedDataParallel(w.model.to(device), device_ids=[rank], process_group=group)
    if part == "python grad hooks":
        for p in ddp.module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(lambda _p: None)
    elif part == "python comm hook":
        ddp.register_comm_hook(group, default_hooks.allreduce_hook)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=lr), w


def rank_main(rank, world, port, model, pairs, batch, shard_dir, results, parts=False):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"  # as a recording has it (record.process.init_process_group)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "0"
    plain_group = dist.new_group(backend="nccl")  # the plain DDP's group, without NCCL's timing events
    cfg = RecordConfig(model=model, world_size=world, iters=2 * pairs + 10, backend="nccl", batch_size=batch)
    recorder = RankRecorder(Path(shard_dir) / f"rank{rank}.jsonl", rank, {})
    run = Run(cfg, rank, world, device, recorder)
    plain, opt, workload = plain_wrapper(model, device, rank, plain_group, cfg.lr, seed=cfg.seed)
    extra = {k: plain_wrapper(model, device, rank, plain_group, cfg.lr, k, cfg.seed) for k in PARTS} if parts else {}
    ratios, times = [], {"plain": [], "recorded": [], **{k: [] for k in extra}}
    for it in range(2 * pairs + 10):
        a = plain_step(plain, opt, workload, it, rank, world, device, batch)
        b = recorded_step(run, it)
        seen = {k: plain_step(d, o, w, it, rank, world, device, batch) for k, (d, o, w) in extra.items()}
        if it >= 10:  # warm-up: cuDNN autotuning, the bucket rebuild, allocator growth
            times["plain"].append(a)
            times["recorded"].append(b)
            ratios.append(b / a)
            for k, t in seen.items():
                times[k].append(t)
    results.put((rank, ratios, times))
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="transformer")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--world-size", type=int, default=None, help="default: every visible GPU")
    p.add_argument("--parts", action="store_true", help="also time plain DDP with empty Python grad hooks, "
                   "and with torch's Python allreduce comm hook")
    args = p.parse_args()
    gpus, ok = visible_gpus()
    if not ok:
        print("bench_gpu_overhead: needs CUDA (no GPU visible here); nothing measured", file=sys.stderr)
        return 2
    world = args.world_size or gpus
    if world > gpus:
        print(f"bench_gpu_overhead: --world-size {world} needs {world} GPUs, {gpus} visible", file=sys.stderr)
        return 2
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = pick_port()
    with tempfile.TemporaryDirectory() as shards:
        procs = [ctx.Process(target=rank_main, args=(r, world, port, args.model, args.pairs,
                                                      args.batch_size, shards, results, args.parts))
                 for r in range(world)]
        for proc in procs:
            proc.start()
        got = [results.get(timeout=1800) for _ in procs]
        for proc in procs:
            proc.join()
    ratios = sorted(r for _, rs, _ in got for r in rs)
    plain = statistics.median(t for _, _, ts in got for t in ts["plain"])
    rec = statistics.median(t for _, _, ts in got for t in ts["recorded"])
    q = lambda f, rs=ratios: rs[int(f * (len(rs) - 1))]  # noqa: E731  (rs sorted)
    extra = statistics.median(b - a for _, _, ts in got for a, b in zip(ts["plain"], ts["recorded"]))
    print(f"{args.model}, {world} rank(s), NCCL, {torch.cuda.get_device_name(0)}: plain {plain * 1e3:.2f} ms, "
          f"recorded {rec * 1e3:.2f} ms per iteration (+{extra * 1e3:.2f} ms); recorded/plain median {q(0.5):.3f} "
          f"(p10 {q(0.1):.3f}, p90 {q(0.9):.3f}, {len(ratios)} pairs); goal <= 1.05")
    for k in got[0][2]:
        if k not in ("plain", "recorded"):
            r = sorted(b / a for _, _, ts in got for a, b in zip(ts["plain"], ts[k]))
            print(f"  plain with {k}: {statistics.median(t for _, _, ts in got for t in ts[k]) * 1e3:.2f} ms, "
                  f"/plain median {q(0.5, r):.3f} (p10 {q(0.1, r):.3f}, p90 {q(0.9, r):.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
