"""Bucket assignment, the one implementation: torch's rules, its caps, and bucket orders.

Used by the readable DDP (``ddpsim.minddp``), the simulator (``ddpsim.sim``) and the
tests against torch. It is a bottom layer: it imports nothing from ddpsim and not torch.

Mirrors, in torch 2.13:
- ``compute_bucket_assignment_by_size`` (torch/csrc/distributed/c10d/reducer.cpp),
  exposed by torch as ``torch.distributed._compute_bucket_assignment_by_size``;
- ``_BucketCapacityConfig.create`` / ``compute_bucket_size_limits``
  (torch/nn/parallel/distributed.py): the caps;
- the layouts built from them by ``_ddp_init_helper`` (construction: sorted by smallest
  index, then reversed) and ``Reducer::rebuild_buckets`` (gradient-ready order).

A parameter is described by a :class:`TensorSpec` (bytes, dtype name, device name), so
that the simulator, which has no tensors, runs the same code as minddp.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from enum import Enum

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
    appended in the order of Note [Leftover buckets follow the hash map]. When
    ``tensor_indices`` is empty (construction) all buckets are then sorted by their
    smallest index; when it is given (the rebuild, in gradient-ready order) they are not.
    """
    if not tensors:
        raise ValueError("bucket assignment needs at least one parameter")
    if not bucket_size_limits or any(c <= 0 for c in bucket_size_limits):
        raise ValueError(f"bucket size limits must be positive, not {list(bucket_size_limits)}")
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


# Note [Leftover buckets follow the hash map]: reducer.cpp keeps the open bucket of each
# (dtype, device) in a ``std::unordered_map<BucketKey, BucketAccumulator, c10::hash>``
# and, after the loop, appends the unfilled ones by iterating that map. On the
# construction path a sort by smallest index follows, so the map's order never shows;
# on the rebuild path it is the launch order of those last buckets (mixed precision:
# torch ``[3 2] [1 0] [5 4]`` where first-seen order gives ``[3 2] [5 4] [1 0]``).
# We reproduce the map of torch's Linux builds (GCC's libstdc++):
# - the key's hash is ``c10::get_hash(type, device)`` (c10/util/hash.h): for a tuple
#   it is ``hash_combine(hash(device), hash(scalar_type))`` with
#   ``hash_combine(s, v) = s ^ (v + 0x9e3779b9 + (s << 6) + (s >> 2))`` on 64 bits; a
#   ScalarType hashes to its enum value; ``std::hash<c10::Device>`` is
#   ``(uint8 type) << 16 | (uint8 index)`` (index -1, "no index", is 255);
# - libstdc++ keeps one singly linked list; a key whose bucket (hash % bucket count)
#   is empty goes to the front of the list, otherwise to the front of its bucket's
#   run; the first insertion makes 13 buckets, and the 14th, 30th, 60th... key grows
#   them (``_Prime_rehash_policy``), re-inserting the nodes in list order by the rule
#   above (``_M_rehash_aux``).
# tests/test_buckets.py checks it against torch's own function for every dtype on the
# CPU and meta devices, up to 40 keys (two rehashes). Other standard libraries (MSVC on
# Windows, libc++ on macOS) may order the map differently; torch's Linux wheels are GCC's.

SCALAR_TYPES = {  # c10/core/ScalarType.h: AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS order
    "uint8": 0, "int8": 1, "int16": 2, "int32": 3, "int64": 4, "float16": 5, "float32": 6,
    "float64": 7, "complex32": 8, "complex64": 9, "complex128": 10, "bool": 11, "qint8": 12,
    "quint8": 13, "qint32": 14, "bfloat16": 15, "quint4x2": 16, "quint2x4": 17, "bits1x8": 18,
    "bits2x4": 19, "bits4x2": 20, "bits8": 21, "bits16": 22, "float8_e5m2": 23,
    "float8_e4m3fn": 24, "float8_e5m2fnuz": 25, "float8_e4m3fnuz": 26, "uint16": 27,
    "uint32": 28, "uint64": 29,
}
DEVICE_TYPES = {"cpu": 0, "cuda": 1, "mkldnn": 2, "opengl": 3, "opencl": 4, "ideep": 5, "hip": 6,
                "fpga": 7, "maia": 8, "xla": 9, "vulkan": 10, "metal": 11, "xpu": 12, "mps": 13,
                "meta": 14, "hpu": 15, "ve": 16, "lazy": 17, "ipu": 18, "mtia": 19}  # c10/core/DeviceType.h
_FAST_BUCKETS = (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)  # libstdc++ hashtable_c++0x.cc
_PRIMES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53, 59, 61, 67, 71, 73, 79,
           83, 89, 97, 103, 109, 113, 127, 137, 139, 149, 157, 167, 179, 193)  # its __prime_list
_MASK = 2 ** 64 - 1


def key_hash(dtype: str, device: str) -> int:
    """``c10::hash<BucketKey>`` of (dtype, device) on a 64-bit build."""
    if dtype not in SCALAR_TYPES:
        raise ValueError(f"unknown dtype {dtype!r} for bucket assignment")
    kind, _, index = device.partition(":")
    if kind not in DEVICE_TYPES:
        raise ValueError(f"unknown device {device!r} for bucket assignment")
    seed = (DEVICE_TYPES[kind] << 16) | ((int(index) if index else -1) & 0xFF)
    return seed ^ ((SCALAR_TYPES[dtype] + 0x9e3779b9 + (seed << 6) + (seed >> 2)) & _MASK)


def _next_bucket_count(n: int) -> int:
    """``_Prime_rehash_policy::_M_next_bkt`` (max load factor 1)."""
    if n < len(_FAST_BUCKETS):
        return _FAST_BUCKETS[n]
    pos = bisect.bisect_left(_PRIMES, n, lo=6)
    if pos >= len(_PRIMES):
        raise ValueError("more (dtype, device) keys than ddpsim's copy of libstdc++'s prime list")
    return _PRIMES[pos]


def _insert(nodes: list, key, n_buckets: int) -> None:
    """``_M_insert_bucket_begin``: front of the list, or front of the key's bucket run."""
    b = key_hash(*key) % n_buckets
    pos = next((j for j, k in enumerate(nodes) if key_hash(*k) % n_buckets == b), 0)
    nodes.insert(pos, key)


def leftover_key_order(keys: list) -> list:
    """Iteration order of a libstdc++ unordered_map after inserting ``keys`` in order.

    ``keys``: (dtype, device) pairs in first-seen order. See Note [Leftover buckets
    follow the hash map].
    """
    nodes, n_buckets, next_resize = [], 1, 0
    for key in keys:
        if len(nodes) + 1 > next_resize:  # _M_need_rehash
            wanted = max(len(nodes) + 1, 0 if next_resize else 11)
            if wanted >= n_buckets:
                n_buckets = _next_bucket_count(max(wanted + 1, n_buckets * 2))
                old, nodes = nodes, []
                for k in old:  # _M_rehash_aux: re-insert in list order
                    _insert(nodes, k, n_buckets)
            next_resize = n_buckets
        _insert(nodes, key, n_buckets)
    return nodes


# ----------------------------------------------------------------------------- caps


def caps_bytes(bucket_cap_mb: float | None, first_bucket_cap_mb: float | None = None) -> tuple[int, int]:
    """(first-bucket cap, cap) in bytes; mirrors ``_BucketCapacityConfig.create``.

    Note [The small first bucket]: the first bucket to be reduced holds the gradients
    computed last; a small one (1 MiB) starts communication sooner. torch applies it
    only when bucket_cap_mb is left at its default (None): an explicit cap is used for
    the first bucket too. ``first_bucket_cap_mb`` is a ddpsim what-if (not in torch).
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


def construction_limits(first: int, cap: int, single: bool) -> list[int]:
    """Mirrors ``_BucketCapacityConfig.compute_bucket_size_limits``: the constructor's limits.

    ``single``: static_graph or not find_unused_parameters (torch 2.13: one bucket).
    """
    if single:
        return [MAXSIZE]
    return [first, cap] if first < cap else [cap]


def construction_layout(specs, first: int, cap: int, single: bool) -> tuple[list[list[int]], list]:
    """``_ddp_init_helper``'s layout: caps over definition order, sorted, then reversed.

    Returns (buckets, per-bucket caps; None for the uncapped single bucket).
    """
    buckets, limits = compute_bucket_assignment_by_size(specs, construction_limits(first, cap, single))
    return buckets[::-1], [None if c == MAXSIZE else c for c in limits[::-1]]


def rebuilt_layout(specs, order: list[int], first: int, cap: int) -> tuple[list[list[int]], list[int]]:
    """``Reducer::rebuild_buckets``: params taken in ``order`` (gradient-ready order)
    under [first, cap]; bucket 0 is the first to close. ``specs`` by parameter index."""
    return compute_bucket_assignment_by_size([specs[i] for i in order], [first, cap], (), list(order))


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
      construction layout), fixed.
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
