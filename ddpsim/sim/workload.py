"""What is simulated: parameters, per-gradient compute times, and bucket layouts.

A :class:`Workload` is everything the simulator needs to know about one DDP rank's
training step, independent of the DDP options being explored:

- the parameter table (DDP index = definition order, bytes, dtype);
- the order in which gradients become ready in backward, and the compute time
  spent before each one (``grad_compute_s[i]`` is the time from the previous
  gradient, or from the start of backward, to ``ready_order[i]``);
- forward, loss, optimizer and the other fixed costs of an iteration;
- the network (:class:`ddpsim.sim.network.Link`) it runs on.

The bucket assignment here is a pure-python copy of torch's
``compute_bucket_assignment_by_size`` (reducer.cpp): parameters are taken in the
given order, kept apart per dtype, and a bucket closes as soon as its size is
``>=`` its cap *after* adding a parameter (never split; may overshoot by one). The
first bucket of each dtype gets the first cap, later buckets the second. Without
explicit ``order`` the buckets are sorted by smallest parameter index (torch's
construction path); DDP then reverses the list, see :func:`construction_layout`.
The tests check it against ``torch.distributed._compute_bucket_assignment_by_size``.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from ddpsim.sim.network import Link

MIB = 1024 * 1024
DEFAULT_CAP_MB = 25
DEFAULT_FIRST_CAP_BYTES = 1 * MIB  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
MAXSIZE = 2 ** 63 - 1  # sys.maxsize: "no cap", the 2.13 single first-iteration bucket


@dataclass
class ParamSpec:
    index: int  # DDP parameter index: definition order
    name: str
    bytes: int
    dtype: str = "float32"
    shape: list[int] = field(default_factory=list)


@dataclass
class Workload:
    """One rank's training step, as the simulator sees it (times in seconds)."""

    name: str
    params: list[ParamSpec]
    ready_order: list[int]  # param indices in gradient-ready order (backward)
    grad_compute_s: list[float]  # compute before each ready_order entry
    link: Link
    forward_s: float = 0.0
    pre_backward_s: float = 0.0  # loss etc. between forward end and backward start
    graph_search_s: float = 0.0  # find_unused_parameters' walk at the end of forward
    finalize_s: float = 0.0  # finalize_backward: copy buckets back into .grad
    step_gap_s: float = 0.0  # backward end -> optimizer start
    optimizer_s: float = 0.0
    iter_gap_s: float = 0.0  # optimizer end -> next forward (data loading...)
    launch_s: float = 0.0  # autograd-thread seconds per bucket launch (comm hook), alone on the core
    launch_s_per_byte: float = 0.0  # ... plus this per byte of the bucket (the hook divides it by world size)
    unused: list[int] = field(default_factory=list)  # params that never get a gradient
    meta: dict = field(default_factory=dict)  # where the numbers came from

    def __post_init__(self):
        validate_workload(self)

    @property
    def n_params(self) -> int:
        return len(self.params)

    @property
    def total_bytes(self) -> int:
        return sum(p.bytes for p in self.params)

    def launch_cost(self, nbytes: int) -> float:
        """Seconds a bucket launch holds the autograd thread (Note [Launching costs the autograd thread])."""
        return self.launch_s + self.launch_s_per_byte * nbytes

    @property
    def backward_compute_s(self) -> float:
        return float(sum(self.grad_compute_s))


def validate_workload(w: Workload) -> None:
    idx = [p.index for p in w.params]
    if sorted(idx) != list(range(len(idx))):
        raise ValueError(f"workload {w.name!r}: parameter indices must be 0..{len(idx) - 1}")
    if not w.ready_order:
        raise ValueError(f"workload {w.name!r} has no gradient events: nothing to simulate")
    if len(w.ready_order) != len(w.grad_compute_s):
        raise ValueError("ready_order and grad_compute_s must have the same length")
    if sorted(list(w.ready_order) + list(w.unused)) != idx:
        raise ValueError("ready_order plus unused must list every parameter exactly once")
    for name in ("forward_s", "pre_backward_s", "graph_search_s", "finalize_s", "step_gap_s",
                 "optimizer_s", "iter_gap_s", "launch_s", "launch_s_per_byte"):
        v = getattr(w, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"workload {w.name!r}: {name} must be a finite number >= 0, not {v!r}")
    if any(not (math.isfinite(t) and t >= 0) for t in w.grad_compute_s):
        raise ValueError(f"workload {w.name!r}: gradient compute times must be finite and >= 0")


# ----------------------------------------------------------------------------- buckets


def compute_bucket_assignment(sizes: list[int], caps: list[int], dtypes: list[str] | None = None,
                              order: list[int] | None = None) -> tuple[list[list[int]], list[int]]:
    """Torch's ``compute_bucket_assignment_by_size`` (dense tensors), in pure python.

    ``sizes[i]``: bytes of parameter i. ``caps``: size limits; the first bucket of
    each dtype uses ``caps[0]``, the next ``caps[1]``, ... the last cap repeats.
    ``order``: parameter indices to take, in that order (torch's ``tensor_indices``,
    the rebuild path: buckets come out in closing order, not sorted). Without it,
    parameters are taken 0..n-1 and buckets are sorted by their smallest index.
    Returns (bucket_indices, per_bucket_caps) like torch.
    """
    if not caps or any(c <= 0 for c in caps):
        raise ValueError("bucket caps must be positive")
    dtypes = dtypes or ["float32"] * len(sizes)
    result: list[tuple[list[int], int]] = []
    open_: dict[str, list] = {}  # dtype -> [indices, size, cap position]
    for i in (order if order is not None else range(len(sizes))):
        acc = open_.get(dtypes[i])
        if acc is None:
            acc = open_[dtypes[i]] = [[], 0, 0]
        acc[0].append(i)
        acc[1] += sizes[i]
        cap = caps[acc[2]]
        if acc[1] >= cap:
            result.append((acc[0], cap))
            acc[0], acc[1] = [], 0
            acc[2] = min(acc[2] + 1, len(caps) - 1)
    for acc in open_.values():
        if acc[0]:
            result.append((acc[0], caps[acc[2]]))
    if order is None:
        result.sort(key=lambda r: min(r[0]))
    return [r[0] for r in result], [r[1] for r in result]


def caps_bytes(bucket_cap_mb: float | None, first_bucket_cap_mb: float | None = None) -> tuple[int, int]:
    """(first cap, cap) in bytes, following torch 2.13's _BucketCapacityConfig.

    The 1 MiB first cap applies only when bucket_cap_mb is left at its default.
    """
    if bucket_cap_mb is not None:
        _check_cap(bucket_cap_mb, "bucket_cap_mb")
    if first_bucket_cap_mb is not None:
        _check_cap(first_bucket_cap_mb, "first_bucket_cap_mb")
    cap = int((DEFAULT_CAP_MB if bucket_cap_mb is None else bucket_cap_mb) * MIB)
    first = DEFAULT_FIRST_CAP_BYTES if bucket_cap_mb is None else cap
    if first_bucket_cap_mb is not None:
        first = int(first_bucket_cap_mb * MIB)
    return max(first, 1), max(cap, 1)


def _check_cap(v, name):
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a positive number of MiB, not {v!r}")


def construction_layout(w: Workload, first: int, cap: int,
                        single: bool) -> tuple[list[list[int]], list[int | None]]:
    """DDP's constructor layout: one bucket (``single``), else caps over definition order,
    reversed. Returns (buckets, per-bucket caps; None for the uncapped single bucket)."""
    sizes, dtypes = [p.bytes for p in w.params], [p.dtype for p in w.params]
    caps = [MAXSIZE] if single else ([first, cap] if first < cap else [cap])
    buckets, limits = compute_bucket_assignment(sizes, caps, dtypes)
    return list(reversed(buckets)), [None if c == MAXSIZE else c for c in reversed(limits)]


def ordered_layout(w: Workload, order: list[int], first: int,
                   cap: int) -> tuple[list[list[int]], list[int]]:
    """The rebuild path: params taken in ``order``; bucket 0 is the first to close."""
    sizes, dtypes = [p.bytes for p in w.params], [p.dtype for p in w.params]
    return compute_bucket_assignment(sizes, [first, cap], dtypes, order=order)


ORDERS = ("torch", "reverse", "definition", "ready", "random")


def param_order(w: Workload, order, seed: int = 0) -> list[int]:
    """The parameter order that an ``order`` what-if feeds to the bucket assignment."""
    n = w.n_params
    if isinstance(order, (list, tuple)):
        order = [int(i) for i in order]
        if sorted(order) != list(range(n)):
            raise ValueError(f"a user order must list each of the {n} parameter indices once")
        return order
    if order == "definition":
        return list(range(n))
    if order == "reverse":
        return list(range(n - 1, -1, -1))
    if order == "ready":
        return list(w.ready_order) + [i for i in reversed(range(n)) if i in set(w.unused)]
    if order == "random":
        out = list(range(n))
        random.Random(seed).shuffle(out)
        return out
    raise ValueError(f"order must be one of {', '.join(ORDERS)} or a list of indices, not {order!r}")
