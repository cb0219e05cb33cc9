"""How reducer.cpp orders the buckets left open at the end of an assignment: libstdc++'s
``std::unordered_map`` iteration order, reproduced (part of ``ddpsim.buckets``, which re-exports
``leftover_key_order`` and ``SCALAR_TYPES``; it imports nothing from ddpsim and not torch).
"""
from __future__ import annotations

import bisect

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
