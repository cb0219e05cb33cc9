"""What does recording cost? Plain torch DDP vs instrumented torch DDP, interleaved.

Both run in the same 2 rank processes on the same model: two DDP wrappers over two
identical model copies, stepping A, B, A, B, ... so drift and noise hit both alike.
Instrumented = exactly what ``python -m ddpsim record`` attaches (grad-ready hooks,
the recording comm hook, a RankRecorder writing its shard).

    python benchmarks/bench_record_overhead.py [--model mlp] [--pairs 40] [--world-size 2]

Goal: instrumented / plain <= 1.05 at world size 2 (median of per-pair ratios).
"""
from __future__ import annotations

import argparse
import copy
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
from ddpsim.events import RankRecorder  # noqa: E402
from ddpsim.record.launcher import pick_port  # noqa: E402
from ddpsim.record.worker import pin_to_cpu  # noqa: E402
from ddpsim.record.wrap import TorchProbes  # noqa: E402


def step(ddp, opt, workload, it, rank, world, recorder=None, probes=None):
    inputs, target = call_batch(workload, it, rank, world, None)
    t0 = time.perf_counter()
    if probes:
        probes.before(True)
        recorder.begin_iteration(it, True)
    workload.loss(ddp(*inputs), target).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if probes:
        recorder.span("forward", 0, 0)
        recorder.span("backward", 0, 0)
        probes.after(True, recorder)
        recorder.end_iteration(probes.layout_caps)
    return time.perf_counter() - t0


def rank_main(rank, world, port, model, pairs, shard_dir, results):
    torch.set_num_threads(1)
    pin_to_cpu(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    workload = build_workload(model)
    plain_model, rec_model = workload.model, copy.deepcopy(workload.model)
    plain = torch.nn.parallel.DistributedDataParallel(plain_model)
    inst = torch.nn.parallel.DistributedDataParallel(rec_model)
    recorder = RankRecorder(Path(shard_dir) / f"rank{rank}.jsonl", rank, {})
    probes = TorchProbes(RecordConfig(model=model), inst, recorder)
    opt_a = torch.optim.SGD(plain_model.parameters(), lr=0.01)
    opt_b = torch.optim.SGD(rec_model.parameters(), lr=0.01)
    for it in range(3):  # warm-up, including the rebuild
        step(plain, opt_a, workload, it, rank, world)
        step(inst, opt_b, workload, it, rank, world, recorder, probes)
    times = []
    for k in range(pairs):
        it = 3 + k
        a_first = k % 2 == 0  # alternate which goes first within a pair
        run_a = lambda: step(plain, opt_a, workload, it, rank, world)  # noqa: E731
        run_b = lambda: step(inst, opt_b, workload, it, rank, world, recorder, probes)  # noqa: E731
        a, b = (run_a(), run_b()) if a_first else (run_b(), run_a())[::-1]
        times.append((a, b))
    recorder.finish(None)
    if rank == 0:
        results.put(times)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as shard_dir:
        mp.start_processes(rank_main, args=(args.world_size, pick_port(), args.model, args.pairs,
                                            shard_dir, results), nprocs=args.world_size,
                           start_method="spawn")
        times = results.get(timeout=10)
    ratios = sorted(b / a for a, b in times)
    q = statistics.quantiles(ratios, n=4)
    plain_ms = statistics.median(a for a, _ in times) * 1e3
    print(f"model={args.model} world_size={args.world_size} pairs={len(times)} "
          f"plain median {plain_ms:.1f} ms/iter")
    print(f"instrumented/plain ratio: median {statistics.median(ratios):.3f}, "
          f"IQR {q[0]:.3f}-{q[2]:.3f}, min {ratios[0]:.3f}, max {ratios[-1]:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()
