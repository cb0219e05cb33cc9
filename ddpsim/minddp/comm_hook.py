"""Communication hooks in the readable DDP: ``GradBucket`` (torch/csrc/distributed/c10d/comm.hpp)
and the hook plumbing of the reducer (reducer.cpp: ``register_comm_hook``, ``run_comm_hook``,
the parse of the result in ``finalize_backward``, ``populate_bucket_views_out``) and of DDP
(distributed.py: ``register_comm_hook``, ``_check_comm_hook``), torch 2.13.

Where a hook plugs in: ``Reducer.all_reduce_bucket`` wraps the ready bucket in a ``GradBucket``
and calls ``run_comm_hook``: with no hook the default ``_AllReduceBySumCommHook`` (a plain sum),
else ``hook(state, bucket)``, which returns a ``torch.futures.Future`` holding the new value of
the bucket. ``finalize_backward`` waits for it, and ``finalize_bucket_dense`` copies each
parameter's part of that value to its ``.grad`` (into the bucket first, under gradient_as_bucket_view). Join's shadow allreduces go
through the same ``run_comm_hook`` (``_match_all_reduce_for_bwd_pass``), so a joined rank runs
the user's hook on zeros, as in torch.

Note [A hook owns the division]: with no hook, the reducer divides each gradient by the world
size while copying it into the bucket (Note [Divide while copying]) and the allreduce sums,
giving the mean. A hook replaces the communication entirely (it may compress, skip ranks, or
average over a subgroup), so only the hook knows what to divide by and when: dividing before a
cast to fp16 keeps the sum in range, PowerSGD divides after its low-rank allreduces. So with a
hook registered the reducer copies gradients into the bucket *undivided*
(``bucket_view.copy_(grad)``) and uses whatever the hook's future returns (reducer.cpp, Note
[DDP Communication Hook]); torch's ``allreduce_hook`` divides by the group size itself.

Note [PowerSGD on gloo with several buckets]: torch's ``powerSGD_hook`` issues the bucket's
first allreduce (the uncompressed rank-1 tensors) from the hook, on the autograd thread, but the
allreduces of P and Q from ``Future.then`` callbacks. A callback runs at once on the calling
thread if its future is already complete, else later on gloo's thread, while the autograd thread
goes on launching the next bucket's hook. Timing decides the order, differently on each rank, and
gloo pairs collectives by order: the sizes mismatch and gloo aborts the process
(``gloo::EnforceNotMet ... Received data size doesn't match expected size``). Seen here (2 gloo
ranks, 5-layer MLP, bucket_cap_mb=0.05, 4 buckets): at the first compressed iteration rank 0
issued 522, 1024, 522 elements (the last from gloo's thread) while rank 1 issued 522, 522; a
wrapper that waits for bucket i-1's future before running the hook on bucket i trains to the end.
With one bucket nothing can interleave. (On NCCL a collective's future completes when the kernel
is enqueued, so the callbacks run inline on the autograd thread, in the same order on every
rank.) minddp refuses the combination with one line instead of the abort (``powersgd_gloo_problem``).
"""
from __future__ import annotations

import inspect

import torch
import torch.distributed as dist

from ddpsim.minddp import messages
from ddpsim.minddp.buckets import bucket_views
from ddpsim.minddp.logging_data import failed_check

POWERSGD_HOOKS = ("powerSGD_hook", "batched_powerSGD_hook")  # powerSGD_hook.py
BF16_HOOKS = ("bf16_compress_hook", "bf16_compress_wrapper_hook")  # distributed.py


class CommHookError(RuntimeError):
    """A hook minddp refuses, or a hook that returned something torch's reducer would reject."""


class PowerSGDOnGlooError(CommHookError):
    """Note [PowerSGD on gloo with several buckets]; ``buckets``: how many the reducer has."""

    def __init__(self, message: str, buckets: int):
        super().__init__(message)
        self.buckets = buckets


class GradBucket:
    """Mirrors ``c10d::GradBucket`` (comm.hpp): what a hook sees of one bucket.

    ``buffer()`` is the flat bucket (gradients copied in undivided, Note [A hook owns the
    division]); ``gradients()`` are views into it, one per parameter, with the parameter's shape;
    ``set_buffer`` replaces this object's buffer only (the reducer uses the future's value).
    """

    def __init__(self, index, bucket_count, buffer, offsets, lengths, sizes, parameters):
        self._index, self._bucket_count, self._buffer = index, bucket_count, buffer
        self._offsets, self._lengths, self._sizes = offsets, lengths, sizes
        self._parameters = parameters

    def index(self) -> int:
        return self._index

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def gradients(self) -> list[torch.Tensor]:
        """Mirrors ``GradBucket::getGradients``: ``buffer.slice(offset, offset + length).view(size)``."""
        return [self._buffer.narrow(0, o, n).view(s)
                for o, n, s in zip(self._offsets, self._lengths, self._sizes)]

    def parameters(self) -> list[torch.Tensor]:
        return list(self._parameters)

    def is_last(self) -> bool:
        """The last bucket of the iteration (PowerSGD counts iterations on it)."""
        return self._index == self._bucket_count - 1

    def set_buffer(self, buffer: torch.Tensor) -> None:
        self._buffer = buffer


def make_grad_bucket(index, bucket_count, bucket, params, buffer=None) -> GradBucket:
    """The ``GradBucket`` that ``all_reduce_bucket`` / ``get_grad_buckets`` build from a minddp
    ``Bucket``: offsets, lengths and sizes of its parameters, and ``buffer`` (default: its
    gradients; Join passes zeros)."""
    members = [params[i] for i in bucket.variable_indices]
    lengths = [p.numel() for p in members]
    offsets = [sum(lengths[:i]) for i in range(len(lengths))]
    return GradBucket(index, bucket_count, bucket.gradients if buffer is None else buffer,
                      offsets, lengths, [p.size() for p in members], members)


def check_comm_hook(ddp, hook) -> None:
    """Mirrors ``DistributedDataParallel._check_comm_hook``: callable, annotations, and the bf16
    hook only where torch allows it (CUDA with NCCL >= 2.10, or XPU with XCCL); each refusal goes
    through ``ddp._log_and_throw`` (Note [Errors in the logging data] in minddp/logging_data.py).

    ddpsim only: a hook with no ``bucket`` parameter gets this one-line TypeError (torch's check
    fails there with ``KeyError: 'bucket'``, which it does not log); a ``bucket`` annotated with
    minddp's ``GradBucket`` is accepted too.
    """
    if not callable(hook):
        ddp._log_and_throw(TypeError, "Communication hook must be callable.")
    sig = inspect.signature(hook)
    if "bucket" not in sig.parameters:
        raise TypeError(f"Communication hook {getattr(hook, '__name__', hook)!r} must take a parameter "
                        "named 'bucket': hook(state, bucket) -> torch.futures.Future[torch.Tensor]")
    if sig.parameters["bucket"].annotation not in (inspect.Parameter.empty, dist.GradBucket, GradBucket):
        ddp._log_and_throw(ValueError, "Communication hook: bucket annotation should be dist.GradBucket.")
    if sig.return_annotation not in (inspect.Signature.empty, torch.futures.Future[torch.Tensor]):
        ddp._log_and_throw(ValueError, "Communication hook: return annotation should be "
                                       "torch.futures.Future[torch.Tensor].")
    if getattr(hook, "__name__", None) in BF16_HOOKS and not bf16_hook_supported():
        ddp._log_and_throw(TypeError, "BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+ "
                                      "or XPU and XCCL")


def bf16_hook_supported() -> bool:
    """The condition of ``_check_comm_hook`` for ``bf16_compress_hook``."""
    cuda = torch.version.cuda is not None or torch.version.hip is not None
    nccl = cuda and dist.is_nccl_available() and torch.cuda.nccl.version() >= (2, 10)
    xccl = getattr(dist, "is_xccl_available", lambda: False)() and torch.xpu.is_available()
    return bool(nccl or xccl)


class PythonCommHook:
    """Mirrors ``c10d::PythonCommHook`` (python_comm_hook.cpp): ``runHook`` and ``parseHookResult``."""

    def __init__(self, state, hook):
        self.state, self.hook = state, hook

    def run_hook(self, bucket: GradBucket) -> torch.futures.Future:
        future = self.hook(self.state, bucket)
        if not (callable(getattr(future, "wait", None)) and callable(getattr(future, "then", None))):
            raise CommHookError(f"Communication hook {getattr(self.hook, '__name__', self.hook)!r} "
                                f"returned {type(future).__name__}, not a torch.futures.Future")  # a Work's .get_future() is one too
        return future

    @staticmethod
    def parse_hook_result(value) -> torch.Tensor:
        if not isinstance(value, torch.Tensor):
            raise CommHookError("a communication hook's future must hold one tensor (the bucket's "
                                f"new value), got {type(value).__name__}")
        return value


def register_comm_hook(reducer, state, hook) -> None:
    """Mirrors ``Reducer::register_comm_hook``: once only. Like torch, there is no rule against
    registering after the first iteration (distributed.py's docstring only advises before the
    first backward); the hook then applies from the next bucket launched."""
    if reducer.comm_hook is not None:
        raise failed_check(reducer, RuntimeError(messages.ONCE_PYTHON))
    check_powersgd_gloo(hook, reducer)
    reducer.comm_hook = PythonCommHook(state, hook)


def run_comm_hook(reducer, bucket: GradBucket) -> torch.futures.Future:
    """Mirrors ``Reducer::run_comm_hook``: the registered hook, else ``run_allreduce_hook``
    (``_AllReduceBySumCommHook``: a sum; the divide happened while copying into the bucket)."""
    if reducer.comm_hook is None:
        return run_allreduce_hook(reducer.process_group, bucket)
    check_powersgd_gloo(reducer.comm_hook.hook, reducer)
    return reducer.comm_hook.run_hook(bucket)


def run_allreduce_hook(process_group, bucket: GradBucket) -> torch.futures.Future:
    """Mirrors ``Reducer::run_allreduce_hook`` (``_AllReduceBySumCommHook``): a sum of the bucket's
    buffer, undivided; the future holds ``[tensor]``. torch's optimizer-in-backward hook calls it
    too (``reducer._run_allreduce_hook``: minddp/optimizer_in_backward.py)."""
    return dist.all_reduce(bucket.buffer(), group=process_group, async_op=True).get_future()


def bucket_result(reducer, value) -> torch.Tensor:
    """The parse in ``Reducer::finalize_backward``: ``parseCppCommHookResult`` (the default hook's
    future holds ``[tensor]``) or the registered hook's ``parseHookResult`` (one tensor)."""
    if reducer.comm_hook is None:
        return value[0]
    return reducer.comm_hook.parse_hook_result(value)


def populate_bucket_views_out(bucket, result: torch.Tensor, params) -> list[torch.Tensor]:
    """Mirrors ``Reducer::populate_bucket_views_out``: ``bucket_views_out``, one view of the hook's
    result per parameter, with the parameter's strides *now*. ``finalize_bucket_dense`` copies from
    them (Note [Strides changed after construction] in minddp/grad_checks.py)."""
    if result.numel() != bucket.gradients.numel():
        raise CommHookError(f"bucket {bucket.index}: the communication hook returned "
                            f"{result.numel()} elements, the bucket has {bucket.gradients.numel()}")
    return bucket_views(result, [params[i] for i in bucket.variable_indices])


def check_powersgd_gloo(hook, reducer) -> None:
    """Raises ``PowerSGDOnGlooError`` (one line) where torch's run would abort in gloo."""
    problem = powersgd_gloo_problem(hook, reducer.process_group, len(reducer.buckets))
    if problem:
        raise PowerSGDOnGlooError(problem, len(reducer.buckets))


def powersgd_gloo_problem(hook, process_group, bucket_count) -> str | None:
    """One line when torch's PowerSGD hook would run on gloo with several buckets (Note [PowerSGD
    on gloo with several buckets]); None when it can run."""
    name = getattr(hook, "__name__", None)
    if name not in POWERSGD_HOOKS or bucket_count <= 1 or dist.get_backend(process_group) != "gloo":
        return None
    return (f"{name} on gloo with {bucket_count} buckets: its P and Q allreduces are issued from "
            "gloo's callback thread and interleave with the next bucket's on each rank in a "
            "different order (gloo aborts: collective mismatch); use one bucket (a bucket_cap_mb "
            "above the model's size), NCCL, or a hook that waits for the previous bucket")
