"""The one place where ddpsim touches torch's private or version-dependent APIs.

Every use of a private torch attribute or function (names starting with ``_``), or of behaviour
that changed between torch releases, goes through a function in this module, so that a new torch
release needs checking in one file. Each function says which torch versions it was checked on and
what it falls back to when the private API is missing.
"""
from __future__ import annotations


# ----------------------------------------------------------------------------- rebuild (issue 17)


def has_rebuilt_buckets(ddp) -> bool | None:
    """Whether torch's DDP has rebuilt its buckets (``Reducer::rebuild_buckets`` returned True).

    Reads ``DistributedDataParallel._has_rebuilt_buckets``, which ``_pre_forward`` sets when
    ``reducer._rebuild_buckets()`` returns True (checked in torch 2.13's distributed.py).
    None when this torch has no such attribute: callers then fall back to comparing the
    buckets they observe.
    """
    value = getattr(ddp, "_has_rebuilt_buckets", None)
    return bool(value) if value is not None else None
