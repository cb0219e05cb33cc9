"""Replaying a recording: its own bucket layouts, when the options are unchanged.

Note [Replay the recorded layouts]: a recorded trace holds the layouts the real run
used (torch's buckets as its comm hook saw them, or minddp's). When the simulator
replays that run with the options it was recorded with, it takes those layouts rather
than recomputing them, so the simulation never disagrees with its own input about
which parameters shared a bucket. Any layout what-if (another cap, order, or
find_unused_parameters) computes layouts with ``ddpsim.buckets``.
"""
from __future__ import annotations

from ddpsim.buckets import LEGACY_ORDERS, BucketOrder

BUCKETED = ("torch", "minddp")  # impls whose layouts depend on the options below


def recorded_options(trace) -> dict:
    """The layout-deciding options of a recorded run."""
    opts = trace.meta.get("options") or {}
    order = (trace.meta.get("config") or {}).get("order")
    if order is not None and not isinstance(order, str):
        raise ValueError(f"meta.config.order should be a bucket order's name, not {order!r:.40}")
    return {"impl": str(trace.meta.get("impl", "torch")),
            "bucket_cap_mb": opts.get("bucket_cap_mb"),
            "bucket_cap_mb_list": cap_list(opts.get("bucket_cap_mb_list")),
            "find_unused_parameters": bool(opts.get("find_unused_parameters", False)),
            "static_graph": bool(opts.get("static_graph", False)),
            "last_bucket_small": bool(opts.get("last_bucket_small", False)),
            "order": BucketOrder.parse(LEGACY_ORDERS.get(order, order)).value}


def cap_list(value) -> list | None:
    """bucket_cap_mb_list as torch reads it: an empty one is none."""
    return list(value) if value else None


def cap_list_field(opts: dict) -> dict:
    """A recorded run's bucket_cap_mb_list as a SimConfig field ({} where it gave none)."""
    values = cap_list(opts.get("bucket_cap_mb_list"))
    return {"bucket_cap_mb_list": [float(v) for v in values]} if values else {}


def replay_caps(recorded: dict, fields: dict) -> dict:
    """A run's SimConfig fields ``recorded`` under the what-if ``fields``: another bucket_cap_mb
    than the run's, or a first_bucket_cap_mb, drops the run's bucket_cap_mb_list (which torch
    would take instead of them); a bucket_cap_mb_list drops the run's first_bucket_cap_mb."""
    other = (fields.get("bucket_cap_mb", recorded.get("bucket_cap_mb")) != recorded.get("bucket_cap_mb")
             or fields.get("first_bucket_cap_mb") is not None)
    drop = ["bucket_cap_mb_list"] if other and "bucket_cap_mb_list" not in fields else []
    drop += ["first_bucket_cap_mb"] if fields.get("bucket_cap_mb_list") and "first_bucket_cap_mb" not in fields else []
    return {k: v for k, v in recorded.items() if k not in drop}


def recorded_layouts(trace) -> dict | None:
    """The layouts (``Trace.longest_rank``'s) and the options they were built under (None: not a real recording)."""
    if trace.source != "real" or not trace.ranks or not trace.longest_rank.layouts:
        return None
    try:
        options = recorded_options(trace)
    except ValueError:
        return None
    return {"options": options,
            "layouts": [{"from_iteration": lay.from_iteration, "kind": lay.kind,
                         "buckets": [list(b.params) for b in lay.buckets],
                         "caps": [b.cap_bytes for b in lay.buckets]} for lay in trace.longest_rank.layouts]}


def replayed(w, cfg) -> tuple[list, list[str]] | None:
    """(layouts as (buckets, caps), kinds) from the recording when ``cfg`` replays it, else None."""
    rec = (w.meta or {}).get("recorded_layouts")
    if not rec or getattr(cfg, "naive", False) or getattr(cfg, "overlap", False):
        return None
    opts = rec["options"]
    order = cfg.order if isinstance(cfg.order, str) else None
    same = (opts["impl"] in BUCKETED and cfg.bucket_cap_mb == opts["bucket_cap_mb"]
            and cap_list(cfg.bucket_cap_mb_list) == opts.get("bucket_cap_mb_list")
            and cfg.first_bucket_cap_mb is None and order == opts["order"]
            and cfg.find_unused_parameters == opts["find_unused_parameters"]
            and cfg.static_graph == opts["static_graph"]
            and cfg.last_bucket_small == opts.get("last_bucket_small", False))
    lays = rec["layouts"]
    if not same or not 1 <= len(lays) <= 2:
        return None
    known = set(range(w.n_params))
    if any(sorted(i for b in lay["buckets"] for i in b) != sorted(known) for lay in lays):
        return None  # the recording's layouts do not cover this workload's parameters
    return [(lay["buckets"], lay["caps"]) for lay in lays], [lay["kind"] for lay in lays]
