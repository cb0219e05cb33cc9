"""What a DDP communication hook sends for one bucket: the collectives, their bytes and order.

``DistributedDataParallel.register_comm_hook`` replaces the bucket's fp32 allreduce with the
hook's own collectives (torch/distributed/algorithms/ddp_comm_hooks). For the simulator a hook
is a list of *stages*: the collectives of a stage are launched together, and a stage starts when
the one before it has completed (PowerSGD's second allreduce needs the first one's result):

- ``allreduce`` (``default_hooks.allreduce_hook``): one allreduce of the bucket, as without a hook;
- ``fp16`` / ``bf16`` (``fp16_compress_hook``, ``bf16_compress_hook``): one allreduce of the
  bucket cast to 2-byte floats: half the bytes of an fp32 bucket;
- ``noop`` (``debugging_hooks.noop_hook``): nothing is sent (the compute-only bound);
- ``round-robin:N``: bucket i's allreduce on process group i mod N (several in flight);
- ``powersgd`` (``powerSGD_hook``): before ``start_powerSGD_iter`` the plain allreduce; then three
  stages: the tensors not worth compressing (1-D ones among them) in one allreduce, every
  compressed gradient's P (n x r) in one, then every Q (m x r) in one, where a gradient is viewed
  as an (shape[0], rest) matrix and compressed when ``(n + m) r * min_compression_rate < n m``
  (``_should_compress``).

The hook's own compute (``compute_s``) and its collectives' cost are priced at measured rates
(``SimConfig.hook_rates``, ``RATES``; a recording measures them in its ranks:
``ddpsim/record/hookprobe.py``); without rates the compute is free and a 16-bit allreduce costs
half an fp32 one.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

HOOKS = ("allreduce", "fp16", "bf16", "noop", "powersgd", "round-robin:N")
HALF_BYTES = 2  # bytes per element after fp16/bf16 compression
SENT_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}  # what the compress hooks cast the bucket to
HALF_COST = 0.5  # a 2-byte allreduce's time over an fp32 one's of as many elements: half the bytes (NCCL)
RATES = {  # SimConfig.hook_rates (ddpsim/record/hookprobe.py measures them in a recording's ranks)
    "cast_s_per_byte": "seconds per bucket byte of a cast to 2-byte floats and back",
    "matmul_s_per_flop": "seconds per flop of PowerSGD's tall-and-thin matmuls",
    "float16_allreduce_cost": "an fp16 allreduce's time over an fp32 one's of as many elements (default 0.5)",
    "bfloat16_allreduce_cost": "a bf16 allreduce's time over an fp32 one's of as many elements (default 0.5)",
    "allreduce_latency_s": "seconds of the smallest allreduce: a hook's collective costs at least this (default 0)",
}


@dataclass(frozen=True)
class CommHook:
    """A hook by name with its settings (each default is torch's)."""

    name: str = "allreduce"
    groups: int = 1  # round-robin:N: process groups used in turn (1: one group, as DDP's own)
    powersgd_rank: int = 1  # PowerSGDState.matrix_approximation_rank; torch default 1
    powersgd_start_iter: int = 1_000  # PowerSGDState.start_powerSGD_iter (synced steps); torch default 1000
    min_compression_rate: float = 2.0  # PowerSGDState.min_compression_rate; torch default 2

    @staticmethod
    def parse(spec: str | None, **settings) -> "CommHook":
        """``allreduce``, ``fp16``, ``bf16``, ``noop``, ``powersgd`` or ``round-robin:N``."""
        name, _, n = (spec or "allreduce").partition(":")
        if name == "round-robin":
            if not n.isdigit() or int(n) < 1:
                raise ValueError(f"round-robin needs a number of process groups, as round-robin:2, not {spec!r}")
            return CommHook(name, groups=int(n), **settings)
        if name not in HOOKS or n:
            raise ValueError(f"comm hook must be one of {', '.join(HOOKS)}, not {spec!r}")
        return CommHook(name, **settings)


def should_compress(n: int, m: int, rank: int, min_rate: float) -> bool:
    """Mirrors powerSGD_hook's ``_should_compress``: worth it when the compressed size, times the
    minimum rate, is below the uncompressed size."""
    return (n + m) * rank * min_rate < n * m


def powersgd_sizes(shapes: list[tuple[int, ...]], rank: int, min_rate: float) -> tuple[int, int, int]:
    """(uncompressed elements, P elements, Q elements) of one bucket's gradients under PowerSGD."""
    plain = ps = qs = 0
    for shape in shapes:
        n = shape[0] if shape else 1
        m = prod(shape[1:]) if len(shape) > 1 else 1
        r = min(n, m, rank)
        if should_compress(n, m, r, min_rate):
            ps, qs = ps + n * r, qs + m * r
        else:
            plain += n * m
    return plain, ps, qs


def stages(hook: CommHook, shapes: list[tuple[int, ...]], element_bytes: int, step: int) -> list[list[int]]:
    """The bytes of each collective ``hook`` issues for a bucket of gradients ``shapes`` (elements of
    ``element_bytes``) in synced step ``step``, stage by stage."""
    total = sum(prod(s) for s in shapes) * element_bytes
    if hook.name == "noop":
        return []
    if hook.name in ("fp16", "bf16"):
        return [[total * HALF_BYTES // element_bytes]]
    if hook.name != "powersgd" or step < hook.powersgd_start_iter:
        return [[total]]
    plain, ps, qs = powersgd_sizes(shapes, hook.powersgd_rank, hook.min_compression_rate)
    return [[plain * element_bytes], [ps * element_bytes], [qs * element_bytes]]


def priced_bytes(hook: CommHook, nbytes: int, rates: dict) -> float:
    """The fp32 bytes whose allreduce costs what ``hook``'s collective of ``nbytes`` does: a 2-byte
    allreduce costs ``<dtype>_allreduce_cost`` times the fp32 one of as many elements (gloo sums
    fp16 slower per element than fp32: Note [What a plain run cannot show] in record/hookprobe.py)."""
    if hook.name not in SENT_DTYPE:
        return nbytes
    return nbytes / HALF_BYTES * 4 * rates.get(f"{SENT_DTYPE[hook.name]}_allreduce_cost", HALF_COST)


def group_of(hook: CommHook, bucket: int) -> int:
    """The process group bucket ``bucket``'s collectives run on (round-robin: i mod N)."""
    return bucket % hook.groups


def compute_s(hook: CommHook, shapes: list[tuple[int, ...]], element_bytes: int, step: int,
              rates: dict) -> tuple[float, list[float], float]:
    """The hook's own compute for one bucket at ``rates``: (seconds in the hook call before its
    first collective, seconds after each stage but the last, seconds after the last stage).

    fp16/bf16: the cast of the bucket (and its division by the world size) before, the cast back
    into the bucket after. PowerSGD (torch's order): M Q and the copies in the hook call; unpacking
    the uncompressed tensors after the first stage; orthogonalizing P and M^T P after the second;
    P Q^T and the error feedback after the last.
    """
    per_byte, per_flop = rates.get("cast_s_per_byte", 0.0), rates.get("matmul_s_per_flop", 0.0)
    n_stages = len(stages(hook, shapes, element_bytes, step))
    total = sum(prod(s) for s in shapes) * element_bytes
    if hook.name in ("fp16", "bf16"):
        return per_byte * total, [], per_byte * total
    if hook.name != "powersgd" or n_stages < 3:
        return 0.0, [0.0] * max(0, n_stages - 1), 0.0
    plain, ps, qs = powersgd_sizes(shapes, hook.powersgd_rank, hook.min_compression_rate)
    compressed = total // element_bytes - plain  # elements of the matrices PowerSGD compresses
    r = hook.powersgd_rank
    matmul = 2 * compressed * r * per_flop  # one of M Q, M^T P, P Q^T
    orthogonalize = 2 * ps * r * per_flop
    return (matmul + per_byte * total, [per_byte * plain * element_bytes, orthogonalize + matmul],
            matmul + per_byte * compressed * element_bytes)


def device_rates(mem_GBps: float, tflops: float, rank: int = 1) -> dict:
    """``SimConfig.hook_rates`` for a GPU from its profile (``hardware/gpus.json``): a cast reads 4
    bytes and writes 2 per fp32 element (1.5 bytes of memory traffic per bucket byte); PowerSGD's
    tall-and-thin matmuls read the whole gradient matrix for 2 r flops per element, so they run
    at memory speed unless the rank makes them compute-bound."""
    mem = mem_GBps * 1e9
    return {"cast_s_per_byte": 1.5 / mem, "matmul_s_per_flop": max(1 / (tflops * 1e12), 2 / (rank * mem))}


def gpu_rates(gpu: str, rank: int = 1) -> dict:
    """``device_rates`` of GPU profile ``gpu`` (``hardware/gpus.json``); {} for an unknown name."""
    from ddpsim.sim.network import gpus

    p = gpus().get(gpu)
    return device_rates(p["mem_GBps"], p["effective_tflops"], rank) if p else {}
