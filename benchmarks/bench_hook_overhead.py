"""What does recording a comm hook cost? Plain torch DDP with a hook vs ``record --comm-hook``, interleaved.

Each of the 2 gloo ranks (CPU, one torch thread, pinned as a recording pins them) holds two DDP
wrappers over two identical copies of the model, both with the same comm hook
(``ddpsim.record.hooks.build_hook``: torch's own hook functions), and steps them A, B, A, B, ...
(the first of each pair alternating) so that drift and noise hit both alike:
- plain: forward, backward, optimizer step, with the hook registered as a user would;
- recorded: ``ddpsim.record.worker.Run.step`` with ``--comm-hook`` (grad-ready hooks, the hook run
  inside ``hookwatch.watched_hook``, every collective watched, the shard line written).
The batch is made before the timer starts, for both. The ranks meet through a FileStore in a
temporary folder (no port: Note [No port on the network] in ddpsim/record/process.py).

    python benchmarks/bench_hook_overhead.py [--model mlp] [--hook fp16] [--pairs 40] [--bucket-cap-mb X]

Goal (issue 37): recorded / plain <= 1.05 (median of the per-pair ratios, each pair's times summed
over the ranks, with p10 and p90).
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

from ddpsim.events import RankRecorder  # noqa: E402
from ddpsim.experiments.hook_equivalence import bf16_hook  # noqa: E402
from ddpsim.models import build_workload, call_batch  # noqa: E402
from ddpsim.record.config import RecordConfig  # noqa: E402
from ddpsim.record.hooks import build_hook  # noqa: E402
from ddpsim.record.process import pin_to_cpu  # noqa: E402
from ddpsim.record.worker import Run  # noqa: E402

WARMUP = 6  # pairs not counted: the bucket rebuild, PowerSGD's first allocations, allocator growth


def plain_step(ddp, opt, workload, it, rank, world) -> float:
    inputs, target = call_batch(workload, it, rank, world, None)
    t0 = time.perf_counter()
    workload.loss(ddp(*inputs), target).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def recorded_step(run: Run, it: int) -> float:
    batch = run.batch(it)  # made outside the timed step, as for the plain step
    t0 = time.perf_counter()
    run.step(it, batch)
    return time.perf_counter() - t0


def rank_main(rank, world, store_path, cfg_json, pairs, shard_dir, results):
    torch.set_num_threads(1)
    pin_to_cpu(rank)
    cfg = RecordConfig.from_json(cfg_json)
    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    run = Run(cfg, rank, world, torch.device("cpu"), RankRecorder(Path(shard_dir) / f"rank{rank}.jsonl", rank, {}))
    torch.manual_seed(cfg.seed)
    workload = build_workload(cfg.model)
    plain = torch.nn.parallel.DistributedDataParallel(workload.model, bucket_cap_mb=cfg.bucket_cap_mb)
    state, hook = build_hook(cfg.comm_hook, cfg.powersgd_rank, cfg.powersgd_start_iter)
    plain.register_comm_hook(state, bf16_hook if cfg.comm_hook == "bf16" else hook)  # torch refuses the name on CPU
    opt = torch.optim.SGD(workload.model.parameters(), lr=cfg.lr)
    times = []
    for k in range(pairs + WARMUP):
        if k % 2 == 0:
            a = plain_step(plain, opt, workload, k, rank, world)
            b = recorded_step(run, k)
        else:
            b = recorded_step(run, k)
            a = plain_step(plain, opt, workload, k, rank, world)
        if k >= WARMUP:
            times.append((a, b))
    results.put((rank, times))
    dist.barrier()
    dist.destroy_process_group()


def measure(cfg: RecordConfig, pairs: int) -> list[tuple[float, float]]:
    """(plain, recorded) seconds per pair, summed over the ranks: a rank that waits in a collective
    for the other shifts time between them, not out of the pair."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=rank_main, args=(r, cfg.world_size, str(Path(tmp) / "store"), cfg.to_json(),
                                                      pairs, tmp, results)) for r in range(cfg.world_size)]
        for proc in procs:
            proc.start()
        got = [results.get(timeout=1800) for _ in procs]
        for proc in procs:
            proc.join()
    per_rank = [ts for _, ts in sorted(got)]
    return [(sum(a for a, _ in pair), sum(b for _, b in pair)) for pair in zip(*per_rank)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp")
    p.add_argument("--hook", default="fp16", help="a --comm-hook NAME (record/hooks.py)")
    p.add_argument("--pairs", type=int, default=40)
    p.add_argument("--bucket-cap-mb", type=float, default=None)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--powersgd-start-iter", type=int, default=None)
    args = p.parse_args()
    cfg = RecordConfig(model=args.model, world_size=args.world_size, iters=args.pairs + WARMUP,
                       bucket_cap_mb=args.bucket_cap_mb, comm_hook=args.hook, backend="gloo", device="cpu",
                       powersgd_start_iter=args.powersgd_start_iter).validate()
    times = measure(cfg, args.pairs)
    ratios = sorted(b / a for a, b in times)
    q = lambda f: ratios[int(f * (len(ratios) - 1))]  # noqa: E731
    plain = statistics.median(a for a, _ in times) / args.world_size
    rec = statistics.median(b for _, b in times) / args.world_size
    print(f"{args.model}, --comm-hook {args.hook}, cap {args.bucket_cap_mb or 'default'}, {args.world_size} gloo "
          f"ranks, CPU ({os.cpu_count()} cores): plain {plain * 1e3:.2f} ms, recorded {rec * 1e3:.2f} ms per "
          f"iteration (ratio of medians {rec / plain:.3f}); recorded/plain per pair: median {q(0.5):.3f} "
          f"(p10 {q(0.1):.3f}, p90 {q(0.9):.3f}, {len(ratios)} pairs); goal <= 1.05")
    return 0


if __name__ == "__main__":
    sys.exit(main())
