"""What is simulated: parameters, per-gradient compute times, and bucket layouts.

A :class:`Workload` is everything the simulator needs to know about one DDP rank's
training step, independent of the DDP options being explored:

- the parameter table (DDP index = definition order, bytes, dtype);
- the order in which gradients become ready in backward, and the compute time
  spent before each one (``grad_compute_s[i]`` is the time from the previous
  gradient, or from the start of backward, to ``ready_order[i]``);
- forward, loss, optimizer and the other fixed costs of an iteration;
- the network (:class:`ddpsim.sim.network.Link`) it runs on.

The bucket assignment is ``ddpsim.buckets`` (torch's ``compute_bucket_assignment_by_size``,
the one implementation, shared with minddp); :func:`construction_layout` and
:func:`ordered_layout` apply it to a workload's parameter table.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from ddpsim import buckets
from ddpsim.buckets import MIB, BucketCapacityConfig, BucketOrder, TensorSpec  # noqa: F401 (MIB: for tests)
from ddpsim.sim.network import Link


@dataclass
class ParamSpec:
    index: int  # DDP parameter index: definition order
    name: str
    bytes: int
    dtype: str = "float32"
    shape: list[int] = field(default_factory=list)
    device: str = "cpu"  # rank 0's device: with several dtypes it orders the rebuilt buckets

    @property
    def spec(self) -> TensorSpec:
        return TensorSpec(self.bytes, self.dtype, self.device)


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
    buffer_bytes: int = 0  # bytes of the module's buffers (BatchNorm statistics); 0: none
    # multipliers (no unit) on a no_sync micro-step's forward and backward compute against a synced step's
    # (Note [A no_sync step computes alone] in learn/refine.py); 1.0: the same; not a torch option
    no_sync_forward_scale: float = 1.0
    no_sync_backward_scale: float = 1.0
    # seconds one buffer broadcast took at the recorded world size (Note [A broadcast learnt from the
    # recording] in learn/extract.py); None: the link's model (Link.broadcast_s)
    buffer_broadcast_s: float | None = None
    # a GPU profile's busy kernels: per recorded rank, per iteration, where each compute phase kept the GPU
    # busy (analysis/busy.py, Note [The recorded busy time, stretched]); None: busy all through its phases
    busy: list[list[dict]] | None = None
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

    def broadcast_cost(self, link: Link, world_size: int) -> float | None:
        """Seconds of the buffer broadcast: the recorded one scaled by the link's model from the
        recorded world size (Note [A broadcast learnt from the recording] in learn/extract.py);
        None: the link's model alone."""
        k0 = self.meta.get("recorded_world_size")
        if self.buffer_broadcast_s is None or not self.buffer_bytes or not k0:
            return None
        at_k0 = link.broadcast_s(self.buffer_bytes, int(k0))
        scale = link.broadcast_s(self.buffer_bytes, world_size) / at_k0 if at_k0 > 0 else 1.0
        return self.buffer_broadcast_s * scale

    def micro_step_scale(self, sync: bool) -> tuple[float, float]:
        """(forward, backward) compute multipliers of a synced (1, 1) or a no_sync micro-step."""
        return (1.0, 1.0) if sync else (self.no_sync_forward_scale, self.no_sync_backward_scale)

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
                 "optimizer_s", "iter_gap_s", "launch_s", "launch_s_per_byte", "no_sync_forward_scale",
                 "no_sync_backward_scale"):
        v = getattr(w, name)
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
            raise ValueError(f"workload {w.name!r}: {name} must be a finite number >= 0, not {v!r}")
    if not isinstance(w.buffer_bytes, int) or isinstance(w.buffer_bytes, bool) or w.buffer_bytes < 0:
        raise ValueError(f"workload {w.name!r}: buffer_bytes must be an integer >= 0, not {w.buffer_bytes!r}")
    b = w.buffer_broadcast_s
    if b is not None and not (isinstance(b, (int, float)) and math.isfinite(b) and b >= 0):
        raise ValueError(f"workload {w.name!r}: buffer_broadcast_s must be None or a finite number >= 0, not {b!r}")
    if any(not (math.isfinite(t) and t >= 0) for t in w.grad_compute_s):
        raise ValueError(f"workload {w.name!r}: gradient compute times must be finite and >= 0")


# ----------------------------------------------------------------------------- buckets


def compute_bucket_assignment(sizes: list[int], caps: list[int], dtypes: list[str] | None = None,
                              order: list[int] | None = None) -> tuple[list[list[int]], list[int]]:
    """``ddpsim.buckets.compute_bucket_assignment_by_size`` on sizes and dtypes (one device).

    ``sizes[i]``: bytes of parameter i; ``order``: torch's ``tensor_indices`` (the
    rebuild path), else definition order (the construction path).
    """
    dtypes = dtypes or ["float32"] * len(sizes)
    specs = [TensorSpec(n, d) for n, d in zip(sizes, dtypes)]
    if order is None:
        return buckets.compute_bucket_assignment_by_size(specs, caps)
    return buckets.compute_bucket_assignment_by_size([specs[i] for i in order], caps, (), list(order))


def construction_layout(w: Workload, caps: BucketCapacityConfig, static_graph: bool,
                        find_unused: bool) -> tuple[list[list[int]], list[int | None]]:
    """DDP's constructor layout (``ddpsim.buckets.construction_layout``): one bucket (no
    find_unused_parameters, or static_graph, without a list of caps), else the caps over
    definition order, reversed. Caps: None when uncapped."""
    return buckets.construction_layout([p.spec for p in w.params], caps, static_graph, find_unused)


def ordered_layout(w: Workload, order: list[int], caps: BucketCapacityConfig,
                   last_bucket_small: bool = False) -> tuple[list[list[int]], list]:
    """The rebuild path (``ddpsim.buckets.rebuilt_layout``): params taken in ``order``;
    bucket 0 is the first to close (``last_bucket_small``: Note [The small bucket last])."""
    return buckets.rebuilt_layout([p.spec for p in w.params], order, caps, last_bucket_small)


ORDERS = tuple(o.value for o in BucketOrder)  # the simulator runs every BucketOrder


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
        return list(w.ready_order) + sorted(set(w.unused))  # as torch appends static_graph's unused: by index
    if order == "random":
        out = list(range(n))
        random.Random(seed).shuffle(out)
        return out
    raise ValueError(f"order must be one of {', '.join(ORDERS)} or a list of indices, not {order!r}")
