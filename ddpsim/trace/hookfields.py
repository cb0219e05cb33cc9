"""The strict reader's part for a comm hook's fields on a bucket event (``record --comm-hook``).

Kept apart from ``reader.py`` (Note [A strict reader] there); ``r`` is the reader
(``reader._Reader``), whose ``value``, ``count`` and ``fail`` name the field.
"""
from __future__ import annotations

from ddpsim.buckets import SCALAR_TYPES
from ddpsim.trace.checks import MAX_WORLD_SIZE
from ddpsim.trace.types import HOOK_OPS, HookCollective


def hook_fields(r, b, p: str, launch: int, complete: int) -> tuple:
    """(collectives, compress_ns, decompress_ns) of bucket event ``b``, each None when absent.

    Every collective lies inside the hook's span (launch to complete), and the compute before
    and after them fits in it too."""
    span = complete - launch
    compress, decompress = (r.count(b, k, p, True, hi=span) for k in ("compress_ns", "decompress_ns"))
    rows = r.get(b, "collectives", list, p, True)
    if rows is None:
        if compress is not None or decompress is not None:
            r.fail(p, "has compress_ns or decompress_ns but no collectives")
        return None, None, None
    return [_collective(r, c, f"{p}.collectives[{i}]", launch, complete) for i, c in enumerate(rows)], \
        compress, decompress


def _collective(r, c, p: str, launch: int, complete: int) -> HookCollective:
    op, dtype = r.get(c, "op", str, p), r.get(c, "dtype", str, p)
    if op not in HOOK_OPS:
        r.fail(f"{p}.op", f"should be one of {', '.join(HOOK_OPS)}, not {op!r:.40}")
    if dtype not in SCALAR_TYPES:
        r.fail(f"{p}.dtype", f"should be a torch dtype name such as 'float16', not {dtype!r:.40}")
    start, end = r.count(c, "launch_ns", p), r.count(c, "complete_ns", p)
    if not launch <= start <= end <= complete:
        r.fail(p, f"runs from {start} to {end}, outside its hook's span ({launch} to {complete})")
    return HookCollective(op, r.count(c, "bytes", p, hi=r.max_bytes), dtype, r.get(c, "group", str, p),
                          r.value(c, "group_size", int, p, lo=1, hi=MAX_WORLD_SIZE), start, end)
