"""Bucket assignment, the one implementation: torch's rules, its caps, and bucket orders.

Used by the readable DDP (``ddpsim.minddp``), the simulator (``ddpsim.sim``) and the
tests against torch. It is a bottom layer: it imports nothing from ddpsim and not torch.

Mirrors, in torch 2.13:
- ``compute_bucket_assignment_by_size`` (torch/csrc/distributed/c10d/reducer.cpp),
  exposed by torch as ``torch.distributed._compute_bucket_assignment_by_size``;
- ``_BucketCapacityConfig.create`` / ``compute_bucket_size_limits``
  (torch/nn/parallel/distributed.py): the caps, ``bucket_cap_mb`` and ``bucket_cap_mb_list``;
- the layouts built from them by ``_ddp_init_helper`` (construction: sorted by smallest
  index, then reversed) and ``Reducer::rebuild_buckets`` (gradient-ready order).
The order of the buckets left open at the end is in ``ddpsim/bucket_hashmap.py``.

A parameter is described by a :class:`TensorSpec` (bytes, dtype name, device name), so
that the simulator, which has no tensors, runs the same code as minddp.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from ddpsim.bucket_hashmap import SCALAR_TYPES, leftover_key_order  # noqa: F401 (SCALAR_TYPES: for readers)

MIB = 1024 * 1024  # distributed.py: _MB_TO_BYTES
DEFAULT_CAP_MB = 25  # MiB; distributed.py: _DEFAULT_BUCKET_CAP_MB
DEFAULT_FIRST_CAP_BYTES = 1 * MIB  # bytes; torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
MAXSIZE = 2 ** 63 - 1  # sys.maxsize: "no cap", torch 2.13's single first-iteration bucket


@dataclass(frozen=True)
class TensorSpec:
    """What bucket assignment needs to know of a parameter (torch: its tensor)."""

    nbytes: int  # numel * element_size
    dtype: str = "float32"  # torch dtype name without "torch."
    device: str = "cpu"  # "cpu", "cuda:0", ...


def tensor_bytes(tensors) -> int:
    """Bytes of ``tensors`` together (numel x element_size each; duck-typed: no torch import here)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def spec_of(tensor) -> TensorSpec:
    """The TensorSpec of a torch tensor (duck-typed: no torch import here)."""
    return TensorSpec(tensor.numel() * tensor.element_size(),
                      str(tensor.dtype).replace("torch.", ""), str(tensor.device))


def compute_bucket_assignment_by_size(tensors, bucket_size_limits, expect_sparse_gradient=(),
                                      tensor_indices=()) -> tuple[list[list[int]], list[int]]:
    """Mirrors ``compute_bucket_assignment_by_size`` in reducer.cpp, on TensorSpecs.

    Same arguments and result as ``torch.distributed._compute_bucket_assignment_by_size``:
    ``tensors[i]`` is parameter ``tensor_indices[i]`` (or ``i`` when it is empty);
    returns ``(bucket_indices, per_bucket_size_limits)``.

    Note [Bucket assignment by size]: buckets are kept per (dtype, device), because
    one flat buffer holds one dtype on one device. Parameters are added in the given
    order; a bucket closes as soon as its size is >= its limit *after* adding a
    parameter, so a parameter is never split and a bucket may overshoot by one. Each
    (dtype, device) walks through ``bucket_size_limits`` one bucket at a time and then
    stays on the last limit (that is how the small first bucket is made). A sparse
    gradient gets a bucket of its own (limit 0). The buckets still open at the end are
    appended in the order of Note [Leftover buckets follow the hash map] (bucket_hashmap.py). When
    ``tensor_indices`` is empty (construction) all buckets are then sorted by their
    smallest index; when it is given (the rebuild, in gradient-ready order) they are not.
    """
    if not tensors:
        raise ValueError("bucket assignment needs at least one parameter")
    if not bucket_size_limits or any(c < 0 for c in bucket_size_limits):  # size_t in reducer.cpp
        raise ValueError(f"bucket size limits must be sizes >= 0, not {list(bucket_size_limits)}")
    indices = list(tensor_indices) or list(range(len(tensors)))
    result = []  # (indices, limit) in the order buckets close
    open_buckets = {}  # (dtype, device) -> [indices, bytes, limit, limit position]; insertion order
    for spec, index in zip(tensors, indices):
        if expect_sparse_gradient and expect_sparse_gradient[index]:
            result.append(([index], 0))
            continue
        bucket = open_buckets.setdefault((spec.dtype, spec.device), [[], 0, 0, 0])
        bucket[0].append(index)
        bucket[1] += spec.nbytes
        bucket[2] = bucket_size_limits[bucket[3]]
        if bucket[1] >= bucket[2]:
            result.append((bucket[0], bucket[2]))
            bucket[:3] = [[], 0, 0]
            bucket[3] = min(bucket[3] + 1, len(bucket_size_limits) - 1)
    keys = list(open_buckets)
    for k in leftover_key_order(keys):
        if open_buckets[k][0]:
            result.append((open_buckets[k][0], open_buckets[k][2]))
    if not tensor_indices:
        result.sort(key=lambda r: min(r[0]))
    return [r[0] for r in result], [r[1] for r in result]


# ----------------------------------------------------------------------------- caps

# Note [Caps torch takes] (torch 2.13 measured on gloo ranks: tests/test_bucket_cap_list.py):
# a cap is ``int(MiB * 2**20)`` bytes, truncated toward 0, so 0, 1e-9 and -1e-9 MiB are 0
# bytes: a bucket per parameter (a bucket closes once its bytes reach its limit). The
# constructor's limits go to the bucket assignment as size_t, so a negative one is refused
# (a TypeError): a negative ``bucket_cap_mb`` with find_unused_parameters (no static_graph), any
# negative list entry. Elsewhere a negative cap is taken: the constructor builds one bucket
# (sys.maxsize) and reducer.cpp's rebuild reads it as size_t, 2^64 - |cap| bytes, which no
# bucket reaches: one bucket for good (ddpsim writes sys.maxsize, the same layout below 2^63
# bytes of gradients). The Reducer takes every cap as int64: beyond it, a TypeError.
# ``bucket_cap_mb_list`` (MiB per bucket, the first reduced first; the last repeats) replaces
# ``bucket_cap_mb`` (ignored, even inf) and the small first bucket; an empty list is no list.
# It shapes the construction layout too, in every mode (without it find_unused_parameters off
# or static_graph start with one bucket), and the rebuild.


def mib_bytes(value, name: str) -> int:
    """``int(value * MiB)`` as torch computes a cap, or a one-line error where torch fails."""
    if not isinstance(value, (int, float)):  # bool is an int: torch takes True as 1 MiB
        raise ValueError(f"{name} must be a number of MiB, not {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number of MiB, not {value!r}")
    nbytes = value * MIB  # a float, finite: beyond 2^1024 / MiB (1e308 MiB) it is inf, which int() refuses
    if not -MAXSIZE - 1 <= nbytes <= MAXSIZE:
        raise ValueError(f"{name} must be between {-MAXSIZE / MIB:.4g} and {MAXSIZE / MIB:.4g} MiB "
                         f"(torch's Reducer takes the bytes as int64), not {value!r}")
    return int(nbytes)


@dataclass(frozen=True)
class BucketCapacityConfig:
    """Mirrors torch 2.13's ``_BucketCapacityConfig`` (distributed.py): the caps, in bytes.

    Note [The small first bucket]: the first bucket to be reduced holds the gradients
    computed last; a small one (1 MiB) starts communication sooner. torch applies it only
    when bucket_cap_mb is left at its default (None) and no list is given: an explicit cap
    is used for the first bucket too. See Note [Caps torch takes] for the edge values.
    """

    bucket_bytes_cap: int
    per_bucket_bytes_caps: tuple[int, ...]  # bucket_cap_mb_list in bytes; (): none
    first_bucket_bytes_cap: int

    @property
    def bucket_cap_mb(self) -> int:
        """Mirrors the ``bucket_cap_mb`` property: the cap in whole MiB (torch's "for backward compatibility")."""
        return self.bucket_bytes_cap // MIB

    @classmethod
    def create(cls, bucket_cap_mb=None, bucket_cap_mb_list=None,
               first_bucket_cap_mb=None) -> "BucketCapacityConfig":
        """Mirrors ``_BucketCapacityConfig.create``. ``first_bucket_cap_mb``: a ddpsim
        what-if (not in torch), the first bucket's cap, without a list only."""
        cap_mb, default, per = bucket_cap_mb, bucket_cap_mb is None, ()
        if bucket_cap_mb_list is not None and not isinstance(bucket_cap_mb_list, (list, tuple)):
            raise ValueError(f"bucket_cap_mb_list must be a list of numbers of MiB, not {bucket_cap_mb_list!r}")
        if bucket_cap_mb_list:
            if first_bucket_cap_mb is not None:
                raise ValueError("first_bucket_cap_mb and bucket_cap_mb_list: choose one "
                                 "(the list's first entry is the first bucket's cap)")
            per = tuple(mib_bytes(v, "bucket_cap_mb_list entry") for v in bucket_cap_mb_list)
            if min(per) < 0:
                raise ValueError(f"bucket_cap_mb_list entries must be >= 0 MiB, not {list(bucket_cap_mb_list)}: "
                                 "torch's bucket assignment takes no negative size")
            cap_mb, default = max(bucket_cap_mb_list), False
        cap = mib_bytes(DEFAULT_CAP_MB if cap_mb is None else cap_mb, "bucket_cap_mb")
        first = DEFAULT_FIRST_CAP_BYTES if default else cap
        if first_bucket_cap_mb is not None:
            first = mib_bytes(first_bucket_cap_mb, "first_bucket_cap_mb")
            if first <= 0:
                raise ValueError(f"first_bucket_cap_mb must be a positive number of MiB, not {first_bucket_cap_mb!r}")
        return cls(cap, per, first)

    def compute_bucket_size_limits(self, static_graph: bool,
                                   find_unused_parameters: bool) -> tuple[list[int], list[int]]:
        """Mirrors ``compute_bucket_size_limits``: (the constructor's limits, the list the
        Reducer rebuilds under; []: [first cap, cap]). Note [One bucket in iteration 0] in
        minddp/ddp.py; a negative limit here is torch's TypeError (Note [Caps torch takes])."""
        if self.per_bucket_bytes_caps:
            limits = list(self.per_bucket_bytes_caps)
            return limits, limits
        if static_graph or not find_unused_parameters:
            return [MAXSIZE], []
        first, cap = self.first_bucket_bytes_cap, self.bucket_bytes_cap
        limits = [first, cap] if first < cap else [cap]
        if min(limits) < 0:
            raise ValueError(f"a negative bucket cap ({cap / MIB:g} MiB) with find_unused_parameters=True: "
                             "torch's bucket assignment refuses it (without it, or with static_graph, "
                             "torch takes it as no cap)")
        return limits, []

    def rebuild_limits(self) -> list[int]:
        """The limits ``Reducer::rebuild_buckets`` uses (``rebuild_size_limits``)."""
        return rebuild_size_limits(self.per_bucket_bytes_caps, self.first_bucket_bytes_cap,
                                   self.bucket_bytes_cap)


def rebuild_size_limits(bucket_bytes_cap_list, first_bucket_bytes_cap: int, bucket_bytes_cap: int) -> list[int]:
    """Mirrors the limits of ``Reducer::rebuild_buckets``: ``bucket_bytes_cap_list`` if not
    empty, else [first cap, cap], as size_t: a negative one no bucket reaches (MAXSIZE here)."""
    limits = list(bucket_bytes_cap_list) or [first_bucket_bytes_cap, bucket_bytes_cap]
    return [MAXSIZE if c < 0 else c for c in limits]


def _uncapped(limits: list[int]) -> list[int | None]:
    return [None if c >= MAXSIZE else c for c in limits]


def construction_layout(specs, caps: BucketCapacityConfig, static_graph: bool,
                        find_unused: bool) -> tuple[list[list[int]], list]:
    """``_ddp_init_helper``'s layout: its limits over definition order, sorted, then reversed.

    Returns (buckets, per-bucket caps; None where uncapped).
    """
    limits, _ = caps.compute_bucket_size_limits(static_graph, find_unused)
    buckets, per_bucket = compute_bucket_assignment_by_size(specs, limits)
    return buckets[::-1], _uncapped(per_bucket[::-1])


def rebuilt_layout(specs, order: list[int], caps: BucketCapacityConfig,
                   last_bucket_small: bool = False) -> tuple[list[list[int]], list]:
    """``Reducer::rebuild_buckets``: params taken in ``order`` (gradient-ready order) under
    its limits; bucket 0 is the first to close (``last_bucket_small``: Note [The small
    bucket last]). ``specs`` by parameter index."""
    buckets, per_bucket = rebuild_assignment([specs[i] for i in order], list(order), caps.rebuild_limits(),
                                             last_bucket_small)
    return buckets, _uncapped(per_bucket)


def last_bucket_small_requested(environ) -> bool:
    """reducer.cpp reads ``DDP_SET_LAST_BUCKET_CAP`` at each rebuild: exactly "1" turns it on."""
    return environ.get("DDP_SET_LAST_BUCKET_CAP") == "1"


def rebuild_assignment(specs_in_order, order: list[int], limits: list[int],
                       last_bucket_small: bool) -> tuple[list[list[int]], list[int]]:
    """The assignment of ``Reducer::rebuild_buckets``: ``specs_in_order[k]`` is parameter ``order[k]``.

    Note [The small bucket last]: the rebuild's first limit (the 1 MiB first bucket, or a
    ``bucket_cap_mb_list``'s first entry) goes to the first gradients ready, so that their
    allreduce starts early. With ``DDP_SET_LAST_BUCKET_CAP=1`` in the environment, reducer.cpp
    assigns the *reversed* ready order and then reverses the buckets: the first limit goes to
    the last gradients ready, and the bucket they fill is reduced last, so the small bucket ends
    the backward. The parameters inside a bucket stay in reversed order. Measured on torch 2.13
    (2 gloo ranks, six Linear layers, ready order 5..0, bucket_cap_mb=0.006):
    [[5, 4, 3, 2], [1, 0]] without it, [[4, 5], [0, 1, 2, 3]] with it
    (tests/test_last_bucket_small.py).
    """
    if last_bucket_small:
        specs_in_order, order = specs_in_order[::-1], order[::-1]
    bucket_indices, per_bucket = compute_bucket_assignment_by_size(specs_in_order, limits, (), order)
    if last_bucket_small:
        bucket_indices, per_bucket = bucket_indices[::-1], per_bucket[::-1]
    return bucket_indices, per_bucket


# ----------------------------------------------------------------------------- orders


class BucketOrder(str, Enum):
    """Which parameters share a bucket and in which order buckets are reduced.

    One meaning everywhere (simulator ``order``, minddp ``bucket_order``, record ``--order``):

    - ``torch``: torch 2.13's own: the construction layout (one bucket, or caps over
      definition order reversed with find_unused_parameters), rebuilt once in
      gradient-ready order unless find_unused_parameters (without static_graph).
    - ``ready``: caps over the gradient-ready order from the first iteration, fixed
      (what torch's rebuild gives, without the single-bucket first iteration).
      The simulator only: a real run learns the ready order during its first backward.
    - ``reverse``: caps over definition order, then reversed (torch's find_unused
      construction layout), fixed: the layout of every DDP before torch 1.6, which never
      rebuilt (Note [The buckets of the torch a source ran] in experiments/gpu_rate.py).
    - ``definition``: caps over definition order in closing order: bucket 0 holds the
      first-defined parameters, whose gradients arrive last, fixed.
    - ``random``: caps over a seeded shuffle, fixed. The simulator only.
    """

    TORCH = "torch"
    READY = "ready"
    REVERSE = "reverse"
    DEFINITION = "definition"
    RANDOM = "random"

    @classmethod
    def parse(cls, value, allowed=None) -> "BucketOrder":
        """``value`` as a BucketOrder (None: torch); a clear error if it is not one of ``allowed``."""
        allowed = tuple(cls) if allowed is None else tuple(allowed)
        names = ", ".join(o.value for o in allowed)
        try:
            order = cls(value if value is not None else "torch")
        except ValueError:
            raise ValueError(f"order must be one of {names}, not {value!r}") from None
        if order not in allowed:
            raise ValueError(f"order {order.value!r} is not available here: use one of {names}")
        return order


REAL_ORDERS = (BucketOrder.TORCH, BucketOrder.REVERSE, BucketOrder.DEFINITION)  # minddp can run these
# older ddpsim traces and commands: minddp's order "ready" meant torch's rebuild
LEGACY_ORDERS = {"ready": "torch"}
