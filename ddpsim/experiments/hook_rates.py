"""The comm hooks' compute rates on this machine: ``python -m ddpsim.experiments.hook_rates``.

A micro-benchmark with real torch on one thread, for the simulator's ``SimConfig.hook_rates``
(``ddpsim/sim/comm_hooks.py``, ``compute_s``): seconds per byte to cast an fp32 bucket to fp16
and back (what fp16/bf16 compression and PowerSGD's copies cost), and seconds per flop of the
tall-and-thin matmuls PowerSGD does (``M @ Q`` with M of 1024 x 1024, Q of 1024 x r). Each is the
median of ``REPEATS`` timings after a warm-up.
"""
from __future__ import annotations

import json
import statistics
import sys

from ddpsim.experiments.dp_pieces import timings

REPEATS = 15  # timings per rate (the median is kept)
CAST_BYTES = 64 * 2**20  # bytes of the fp32 tensor cast to fp16 and back (past the caches, as a bucket is)
MATRIX, RANK = 1024, 4  # PowerSGD-like matmul: (MATRIX x MATRIX) @ (MATRIX x RANK)


def _median_s(fn) -> float:
    return statistics.median(timings(fn, REPEATS, warmup=1))


def measure() -> dict:
    """{"cast_s_per_byte", "matmul_s_per_flop"} measured here with one torch thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(CAST_BYTES // 4)
        cast = _median_s(lambda: x.to(torch.float16).to(torch.float32)) / (2 * CAST_BYTES)
        m, q = torch.randn(MATRIX, MATRIX), torch.randn(MATRIX, RANK)
        flops = 2 * MATRIX * MATRIX * RANK
        matmul = _median_s(lambda: torch.matmul(m, q)) / flops
    finally:
        torch.set_num_threads(threads)
    return {"cast_s_per_byte": cast, "matmul_s_per_flop": matmul}


def main() -> int:
    print(json.dumps(measure()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
