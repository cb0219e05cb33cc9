"""torch's two C++ communication hooks in the readable DDP: ``c10d::AllReduceCommHook`` and
``c10d::FP16CompressCommHook`` (torch/csrc/distributed/c10d/default_comm_hooks.cpp) and their
registration, ``Reducer::register_builtin_comm_hook`` (reducer.cpp), torch 2.13. DDP's
``_register_builtin_comm_hook`` (minddp/ddp_methods.py) registers them.

Note [Builtin hooks are the Python hooks in C++]: torch ships each of these two hooks twice: in
C++ (``dist.BuiltinCommHookType.ALLREDUCE`` / ``FP16_COMPRESS``, run without the Python
interpreter) and in Python (``default_hooks.allreduce_hook`` / ``fp16_compress_hook``). Both do
the same arithmetic in the same order: like any hook, they get the bucket *undivided* (Note [A hook
owns the division] in minddp/comm_hook.py) and divide it by the group size *before* the allreduce
(in fp16 for FP16_COMPRESS, after the cast, to keep the sum in range), then sum. Measured on torch
2.13 (3 gloo ranks, 3 steps, one bucket, several buckets, gradient_as_bucket_view): each builtin
gives the same gradients as its Python twin bit for bit. ALLREDUCE is not bit-identical to DDP with
no hook at 3 ranks: without a hook the reducer multiplies by 1/3 while copying into the bucket
(Note [Divide while copying]), the hook divides by 3; the two round differently (up to 6e-8 here).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ddpsim.minddp import messages
from ddpsim.minddp.logging_data import failed_check


class AllReduceCommHook:
    """Mirrors ``c10d::AllReduceCommHook``: divide the bucket in place by the group size, allreduce
    it (a sum); the future holds ``[tensor]``."""

    hook = None  # no Python function behind it (what check_powersgd_gloo reads)

    def __init__(self, process_group):
        self.process_group = process_group

    def run_hook(self, bucket) -> torch.futures.Future:
        tensor = bucket.buffer()
        tensor /= dist.get_world_size(self.process_group)  # "Apply the division first to avoid overflow"
        return dist.all_reduce(tensor, group=self.process_group, async_op=True).get_future()

    @staticmethod
    def parse_hook_result(value) -> torch.Tensor:
        """Mirrors ``CppCommHookInterface::parseHookResult``: a tensor, or the first of a list."""
        return value if isinstance(value, torch.Tensor) else value[0]


class FP16CompressCommHook(AllReduceCommHook):
    """Mirrors ``c10d::FP16CompressCommHook``: cast the bucket to fp16, divide by the group size
    (in fp16), allreduce, and copy the fp16 sum back into the bucket (``decompress``)."""

    def run_hook(self, bucket) -> torch.futures.Future:
        compressed = bucket.buffer().to(torch.float16)
        compressed /= dist.get_world_size(self.process_group)
        future = dist.all_reduce(compressed, group=self.process_group, async_op=True).get_future()
        decompressed = bucket.buffer()
        return future.then(lambda fut: decompressed.copy_(fut.value()[0]))


def register_builtin_comm_hook(reducer, comm_hook_type) -> None:
    """Mirrors ``Reducer::register_builtin_comm_hook``: once only, whichever kind came first (the
    Python ``register_comm_hook`` refuses a second hook with the two names the other way round)."""
    if not isinstance(comm_hook_type, dist.BuiltinCommHookType):  # torch: pybind11's argument check, first
        raise TypeError(f"_register_builtin_comm_hook(): comm_hook_type must be a "
                        f"torch.distributed.BuiltinCommHookType, not {type(comm_hook_type).__name__}")
    if reducer.comm_hook is not None:
        raise failed_check(reducer, RuntimeError(messages.ONCE_BUILTIN))
    hooks = {dist.BuiltinCommHookType.ALLREDUCE: AllReduceCommHook,
             dist.BuiltinCommHookType.FP16_COMPRESS: FP16CompressCommHook}
    reducer.comm_hook = hooks[comm_hook_type](reducer.process_group)
