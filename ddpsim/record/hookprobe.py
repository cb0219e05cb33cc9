"""What a comm hook would cost in these ranks, measured at the end of every recording.

A plain recording shows DDP's own fp32 allreduces, and from them alone the simulator cannot tell
what a comm hook would cost on the same machine (Note [What a plain run cannot show]). So each
rank, after its last iteration and on its own device and process group, times the pieces a hook
is made of; ``meta.hook_rates`` carries them (docs/trace-format.md) and the simulator prices a
``--comm-hook`` what-if with them (``SimConfig.hook_rates``, ``ddpsim/sim/comm_hooks.py``).

Note [What a plain run cannot show]: on this 2-core machine, fp16_compress_hook made training
slower and bf16_compress_hook faster than DDP's fp32 allreduce, though both send half the bytes:
gloo sums float16 element by element through float conversions, which costs more per element
than its float32 sum, and bfloat16 less (2 gloo ranks, 1M elements, over 49 recordings: fp16
1.0-1.4x and bf16 0.67-1.03x the fp32 allreduce's time, varying between runs and with size). NCCL
on a GPU reduces 2-byte floats at memory speed, half the fp32 time. A bucket's cast costs what a
cast of a bucket-sized tensor costs (one of 64 MiB is slower per byte: its allocation faults in
fresh pages, which DDP's buckets do not). And the small P and Q allreduces of PowerSGD cost a
collective's latency, which a run whose buckets all have one size cannot separate from its
bandwidth.
"""
from __future__ import annotations

import statistics
import time

from ddpsim import heartbeat
from ddpsim.record.probe import timings

CAST_ELEMENTS = 2 ** 20  # fp32 elements cast like a bucket (4 MiB: between DDP's 1 MiB first bucket and 25 MiB)
ALLREDUCE_ELEMENTS = 2 ** 20  # elements of the fp32/fp16/bf16 allreduces compared (4 MiB in fp32)
SMALL_ELEMENTS = 1024  # elements of the allreduce whose time is a collective's latency (4 KiB)
CHAIN = 8  # allreduces timed one after another, each launched when the last completed: the dtypes' and
# the small one's (as PowerSGD's stages)
CHAIN_ROUNDS = 8  # timed chains of each allreduce dtype after one warm-up (8 x 3 x 8 x ~5 ms here: ~1 s)
ROUNDS = 15  # timed rounds after one warm-up; medians are kept
FALLBACK_MATRIX = 1024  # a square gradient for the matmul rate when the model has no compressible one
MATMUL_BYTES = 64 * 2 ** 20  # at most this much of the model's gradient matrices is copied for the matmuls


def every_rank_here(cfgs, turns) -> bool:
    """Whether every rank calls the probe now, the same answer on each (it runs collectives): not
    with uneven inputs outside Join, where a rank out of data goes on to its final barrier while
    the others still train; not when world sizes take turns (Note [Take turns across world sizes]
    in record/turns.py), where the probe would run beside another group's recorded rounds."""
    return turns is None and (cfgs[0].join or all(c.uneven == 0 for c in cfgs))


def write_rates(recorders, device, world: int, model) -> None:
    """``measure`` for ``model`` and add it to every shard's header as ``hook_rates``."""
    rates = measure(device, world, list(model.parameters()))
    for recorder in recorders:
        recorder.header_update({"hook_rates": rates})


def measure(device, world: int, params: list) -> dict:
    """``SimConfig.hook_rates`` measured in this rank on ``device`` for a model of ``params``;
    every rank must call it: it runs collectives (on CPU tensors or NCCL; gloo with CUDA tensors is
    left out, untried). Local parts that fail (out of memory) are left out; a collective that fails
    fails the recording, as a failing collective in training would."""
    import torch
    import torch.distributed as dist

    heartbeat.beat(stage="measuring hook costs")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rates = {}
    for name, rate in (("cast_s_per_byte", _cast_rate), ("matmul_s_per_flop", _matmul_rate)):
        try:
            rates[name] = rate(device, sync, params)
        except (RuntimeError, MemoryError):  # torch.cuda.OutOfMemoryError is a RuntimeError
            pass
    if world > 1 and (device.type == "cpu" or dist.get_backend() == "nccl"):
        rates.update(_allreduce_costs(device, sync))
    return rates


def _median_s(fn, sync) -> float:
    return statistics.median(timings(fn, ROUNDS, 1, sync))


def _cast_rate(device, sync, _params) -> float:
    """Seconds per bucket byte of fp16_compress_hook's casts: the bucket to fp16 divided by the world
    size (in the hook call), then the reduced fp16 back into the fp32 bucket (its callback)."""
    import torch

    bucket = torch.randn(CAST_ELEMENTS, device=device)
    half = bucket.to(torch.float16)
    compress = _median_s(lambda: bucket.to(torch.float16).div_(2), sync)
    decompress = _median_s(lambda: bucket.copy_(half), sync)
    return (compress + decompress) / 2 / (CAST_ELEMENTS * 4)


def _matmul_rate(device, sync, params: list) -> float:
    """Seconds per flop of PowerSGD's ``M @ Q`` (rank 1) over this model's gradients viewed as
    matrices, where PowerSGD would compress them (else one square matrix)."""
    import torch

    shapes = [(p.shape[0], p.numel() // p.shape[0]) for p in params if p.dim() >= 2 and p.numel() > 0]
    shapes = [(n, m) for n, m in shapes if (n + m) * 2 < n * m]
    kept, size = [], 0
    for n, m in shapes:  # the model's gradient matrices in order, up to MATMUL_BYTES of them
        if size + n * m * 4 <= MATMUL_BYTES:
            kept.append((n, m))
            size += n * m * 4
    shapes = kept or [(FALLBACK_MATRIX, FALLBACK_MATRIX)]
    pairs = [(torch.randn(n, m, device=device), torch.randn(m, 1, device=device)) for n, m in shapes]
    seconds = _median_s(lambda: [torch.matmul(a, q) for a, q in pairs], sync)
    return seconds / sum(2 * n * m for n, m in shapes)


def _allreduce_costs(device, sync) -> dict:
    """A 2-byte allreduce's time over the fp32 one's of as many elements, and a small allreduce's
    time (a collective's latency). Each is timed in a chain of ``CHAIN``, each launched when the one
    before completed: a lone one timed after a barrier also waits for the slowest rank to leave it,
    0.1 to 3 ms here, as long as a 4 MiB allreduce's own difference between dtypes (in one pair of
    processes, one allreduce per round put bf16 at 0.64-1.16x fp32, chains of 8 at 0.75-0.93x).
    The three dtypes' chains take turns, each after a barrier; the median of each round's ratio is
    kept. Timed at the model's largest bucket instead (0.25 to 32 MiB), the ratios moved with size
    (at 16 MiB fp16 0.93-1.07x, bf16 0.51-0.75x) but the predictions of the recorded hooked runs
    did not improve (docs/comm-hooks.md), so one size serves."""
    import torch
    import torch.distributed as dist

    dtypes = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
    tensors = {name: torch.zeros(ALLREDUCE_ELEMENTS, dtype=dt, device=device) for name, dt in dtypes.items()}
    times: dict[str, list[float]] = {name: [] for name in tensors}
    for round_ in range(CHAIN_ROUNDS + 1):
        for name, x in tensors.items():
            dist.barrier()
            sync()
            t0 = time.perf_counter()
            for _ in range(CHAIN):
                dist.all_reduce(x)
            sync()
            if round_:  # the first round warms up
                times[name].append(time.perf_counter() - t0)
    small = torch.zeros(SMALL_ELEMENTS, device=device)
    dist.barrier()
    latency = _median_s(lambda: [dist.all_reduce(small) for _ in range(CHAIN)], sync) / CHAIN
    costs = {f"{name}_allreduce_cost": statistics.median(t / t32 for t, t32 in zip(times[name], times["float32"]))
             for name in ("float16", "bfloat16")}
    return {**costs, "allreduce_latency_s": latency}
