"""The comm hooks ``record --comm-hook NAME`` registers on torch's DDP, through the recorder's watch.

NAME is ``allreduce``, ``fp16``, ``bf16`` (torch's ``default_hooks``), ``powersgd``
(``powerSGD_hook.powerSGD_hook`` with a ``PowerSGDState``), ``noop`` (``debugging_hooks.noop_hook``),
``round-robin:N`` (``round_robin_hook`` below) or ``path/to/file.py:factory``, whose factory takes no
arguments and returns ``(state, hook)``, as ``register_comm_hook(state, hook)`` takes them. The hook
runs unchanged inside ``hookwatch.watched_hook`` (Note [Watching a hook's collectives]).
"""
from __future__ import annotations

from ddpsim.errors import CLIError

BUILT_IN = ("allreduce", "fp16", "bf16", "powersgd", "noop")
MAX_GROUPS = 64  # round-robin:N process groups (each is a set of gloo/NCCL connections per rank)
POWERSGD_RANK = 1  # torch's PowerSGDState matrix_approximation_rank default
POWERSGD_START_ITER = 1_000  # torch's PowerSGDState start_powerSGD_iter default (iterations)
CHOICES = "allreduce, fp16, bf16, powersgd, noop, round-robin:N or path/to/file.py:factory"


def parse_comm_hook(name: str) -> tuple[str, int | str | None]:
    """``--comm-hook NAME`` as (kind, argument), or CLIError in one line; nothing is imported."""
    if name in BUILT_IN:
        return name, None
    if name.startswith("round-robin:"):
        n = name.partition(":")[2]
        if not (n.isdigit() and 1 <= int(n) <= MAX_GROUPS):
            raise CLIError(f"--comm-hook round-robin:N needs a number of process groups N from 1 to "
                           f"{MAX_GROUPS}, not {n!r:.40}")
        return "round-robin", int(n)
    where, _, attr = name.rpartition(":")
    if where.endswith(".py") and attr:
        return "user", name
    raise CLIError(f"--comm-hook must be one of {CHOICES}, not {name!r:.60}")


def check_comm_hook(name: str) -> None:
    """Fail fast, before any process starts: a bad name, or a hook file without its factory."""
    kind, spec = parse_comm_hook(name)
    if kind == "user":
        _factory(spec)


def _factory(spec: str):
    from ddpsim.models import ModelSpecError, load_callable

    where, _, attr = spec.rpartition(":")
    try:
        return load_callable(where, attr, noun="comm hook")
    except ModelSpecError as e:
        raise CLIError(f"--comm-hook {spec}: {e}") from None


def build_hook(name: str, powersgd_rank: int | None = None, powersgd_start_iter: int | None = None):
    """(state, hook) for ``register_comm_hook``; made in every rank, after the process group.

    ``round-robin:N`` makes its N groups here with ``dist.new_group`` (every rank makes them in
    the same order, as torch requires)."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks, powerSGD_hook

    kind, arg = parse_comm_hook(name)
    plain = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
             "bf16": default_hooks.bf16_compress_hook, "noop": debugging_hooks.noop_hook}
    if kind in plain:
        return None, plain[kind]
    if kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=powersgd_rank or POWERSGD_RANK,
            start_powerSGD_iter=POWERSGD_START_ITER if powersgd_start_iter is None else powersgd_start_iter)
        return state, powerSGD_hook.powerSGD_hook
    if kind == "round-robin":
        return RoundRobinState([dist.new_group() for _ in range(arg)]), round_robin_hook
    made = _factory(arg)()
    if not (isinstance(made, tuple) and len(made) == 2 and callable(made[1])):
        raise CLIError(f"--comm-hook {arg}: the factory must return (state, hook), not {type(made).__name__}")
    return made


class RoundRobinState:
    """The process groups ``round_robin_hook`` spreads the buckets over."""

    def __init__(self, groups: list):
        self.groups = groups


def round_robin_hook(state, bucket):
    """torch's ``default_hooks.allreduce_hook`` with bucket i on group i mod N.

    Note [Round-robin groups as a hook]: Li et al. (VLDB 2020, §3.2.3) spread DDP's buckets over
    several process groups so that collectives run concurrently; torch's
    ``_round_robin_process_groups`` that did it is gone (2.13), and a comm hook is how a user would
    try the idea now: the same divide-allreduce-return as ``_allreduce_fut``, on another group.
    (No annotations: torch checks a comm hook's annotations.)
    """
    import torch.distributed as dist

    group = state.groups[bucket.index() % len(state.groups)]
    buffer = bucket.buffer()
    buffer.div_(group.size())
    return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(lambda fut: fut.value()[0])
