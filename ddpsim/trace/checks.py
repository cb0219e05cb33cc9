"""The strict reader's checks on what one field cannot say alone (Note [A strict reader] in reader.py).

The bounds on ``meta`` fields that analyses and the simulator read, and the checks
across fields: distinct ranks inside the world, known parameters, ordered steps.
``r`` is the reader (``reader._Reader``): its ``value`` and ``fail`` name the field.
"""
from __future__ import annotations

from ddpsim.buckets import MAXSIZE, MIB, BucketCapacityConfig
from ddpsim.errors import STATIC_GRAPH_NO_SYNC
from ddpsim.trace.types import RankTrace, Trace

MAX_WORLD_SIZE = 10_000_000  # ranks
MAX_CAP_MB = MAXSIZE / MIB  # MiB: torch's Reducer takes a cap's bytes as int64 (Note [Caps torch takes])

# meta fields that analyses read: key -> (type, lower bound or None); anything else in meta is free text
META_FIELDS = {
    "world_size": (int, 1), "backend": (str, None), "model": (str, None), "impl": (str, None),
    "options": (dict, None), "config": (dict, None), "link": (dict, None), "pinning": (dict, None),
    "calibration": (dict, None), "workload": (dict, None), "allreduce_probe": (list, None),
    "rank_groups": (list, None), "ranks_included": (list, None), "missing_ranks": (list, None),
    "placement": (dict, None), "timebase": (dict, None), "hook_rates": (dict, None),
    "buffer_bytes": (int, 0), "gpu": (str, None),
}
NESTED_FIELDS = {  # meta.<first>.<second>: what the simulator and analyses read from them
    ("options", "bucket_cap_mb"): (float, -MAX_CAP_MB), ("options", "find_unused_parameters"): (bool, None),
    ("options", "static_graph"): (bool, None), ("options", "gradient_as_bucket_view"): (bool, None),
    ("options", "no_sync_every"): (int, 1), ("options", "iters"): (int, 0),
    ("options", "batch_size"): (int, 1), ("config", "pin_cpus"): (bool, None),
    ("options", "uneven"): (int, 0), ("options", "join"): (bool, None), ("placement", "device"): (str, None),
    ("options", "comm_hook"): (str, None), ("options", "powersgd_rank"): (int, 1),
    ("options", "powersgd_start_iter"): (int, 0), ("options", "skip_all_reduce_unused_params"): (bool, None),
    ("options", "batched_grad_copy"): (bool, None), ("options", "last_bucket_small"): (bool, None),
    ("link", "concurrency"): (int, 1), ("link", "shared_core"): (bool, None), ("link", "cpus"): (int, 0),
    ("pinning", "cpus"): (int, 0), ("calibration", "world_size"): (int, 1),
    ("calibration", "host_cpus"): (int, 0), ("calibration", "intercept_s"): (float, None),
    ("calibration", "s_per_byte"): (float, None), ("calibration", "cpu_intercept_s"): (float, None),
    ("calibration", "cpu_s_per_byte"): (float, None), ("calibration", "time_slice_s"): (float, 0),
    ("workload", "name"): (str, None), ("workload", "kind"): (str, None), ("workload", "arch"): (str, None),
    ("workload", "hardware"): (str, None), ("workload", "batch"): (int, 1),
    ("config", "world_size"): (int, 1), ("config", "bucket_cap_mb"): (float, -MAX_CAP_MB),
    ("config", "find_unused_parameters"): (bool, None), ("config", "no_sync_every"): (int, 1),
    ("hook_rates", "cast_s_per_byte"): (float, 0), ("hook_rates", "matmul_s_per_flop"): (float, 0),
    ("hook_rates", "float16_allreduce_cost"): (float, 0), ("hook_rates", "bfloat16_allreduce_cost"): (float, 0),
    ("hook_rates", "allreduce_latency_s"): (float, 0),
}


# ``ddp_logging_data`` is torch's ``_get_ddp_logging_data()`` verbatim, free but for the keys analyses read
# (ddpsim.analysis.torch_logger): torch's durations (ns) and the iteration count, int64 integers, and its flags
LOGGED_INTS = ("forward_compute_time", "backward_compute_time", "backward_comm_time",
               "backward_compute_comm_overlap_time", "iteration")
LOGGED_FLAGS = ("has_error", "static_graph")  # torch writes 0/1; a bool reads alike


NESTED_MAX = {"bucket_cap_mb": MAX_CAP_MB, "no_sync_every": 1_000_000, "concurrency": 64,  # as the simulator allows
              "world_size": MAX_WORLD_SIZE, "batch": 1_000_000}


def check_meta(r, meta: dict) -> None:
    for key, (typ, lo) in META_FIELDS.items():
        r.value(meta, key, typ, "meta", optional=True, lo=lo,
                hi={"world_size": MAX_WORLD_SIZE, "buffer_bytes": r.max_bytes}.get(key))
    for (outer, key), (typ, lo) in NESTED_FIELDS.items():
        if isinstance(meta.get(outer), dict):
            r.value(meta[outer], key, typ, f"meta.{outer}", optional=True, lo=lo, hi=NESTED_MAX.get(key))
    for outer in ("options", "config"):  # torch 2.13's per-bucket caps, where a run gave them
        caps = meta[outer].get("bucket_cap_mb_list") if isinstance(meta.get(outer), dict) else None
        if caps is not None:
            try:
                BucketCapacityConfig.create(None, caps)
            except ValueError as e:
                r.fail(f"meta.{outer}.bucket_cap_mb_list", str(e))
    if isinstance(meta.get("options"), dict):
        check_runnable(r, meta["options"])


def is_int64(v) -> bool:
    """An integer a trace can hold: int64, as every integer field (not a bool)."""
    return type(v) is int and -2**63 <= v < 2**63


def check_logging_data(r, data: dict | None, path: str) -> dict | None:
    """``data`` (a rank's ``ddp_logging_data``, or None), its keys that analyses read checked: present, each
    is an int64 integer (a flag may be true/false), never null. ``path`` names the field."""
    for key in (LOGGED_INTS + LOGGED_FLAGS) if data is not None else ():
        v = data.get(key, 0)
        if not (is_int64(v) or key in LOGGED_FLAGS and type(v) is bool):
            what = "an integer" + (" or true/false" if key in LOGGED_FLAGS else " within int64")
            r.fail(f"{path}.{key}", f"should be {what}, not {v!r:.40}")
    return data


def check_runnable(r, opts: dict) -> None:
    """DDP options torch's DDP refuses, at construction or in its first step: no run of them records a
    step, and nothing can replay them (the recorder and the simulator refuse them up front)."""
    static, every = opts.get("static_graph") is True, opts.get("no_sync_every")
    if static and isinstance(every, int) and every > 1:  # Note [static_graph's first step must sync]
        r.fail("meta.options", STATIC_GRAPH_NO_SYNC.format(every=every))
    try:
        BucketCapacityConfig.create(opts.get("bucket_cap_mb"), opts.get("bucket_cap_mb_list")) \
            .compute_bucket_size_limits(static, opts.get("find_unused_parameters") is True)
    except ValueError as e:  # e.g. a negative cap with find_unused_parameters (Note [Caps torch takes])
        r.fail("meta.options", str(e))


def check_consistency(r, trace: Trace) -> None:
    """What one field cannot say alone: distinct ranks inside the world, known parameters, ordered steps."""
    world = trace.world_size
    seen = set()
    for i, rank in enumerate(trace.ranks):
        if rank.rank >= world or rank.rank in seen:
            why = "appears twice" if rank.rank in seen else f"is not below the world size {world}"
            r.fail(f"ranks[{i}].rank", f"rank {rank.rank} {why}")
        seen.add(rank.rank)
    total = sum(p.bytes for p in trace.params)
    if total > r.max_bytes:
        r.fail("params", f"the parameters hold {total} bytes together; a trace holds at most {r.max_bytes}")
    indices = [p.index for p in trace.params if p.index is not None]
    if sorted(indices) != list(range(len(indices))):
        r.fail("params", f"DDP's parameter indices must be 0..{len(indices) - 1}, each once")
    known = set(indices) if indices else None
    for i, rank in enumerate(trace.ranks):
        _check_rank(r, rank, f"ranks[{i}]", known)


def _check_rank(r, rank: RankTrace, path: str, known: set | None) -> None:
    last = -1
    for j, lay in enumerate(rank.layouts):
        if lay.from_iteration < last:
            r.fail(f"{path}.layouts[{j}].from_iteration", "layouts must come in iteration order")
        last = lay.from_iteration
        for k, b in enumerate(lay.buckets):
            _known(r, b.params, known, f"{path}.layouts[{j}].buckets[{k}].params")
    last, layout = -1, 0
    for j, it in enumerate(rank.iterations):
        if it.iteration <= last:
            r.fail(f"{path}.iterations[{j}].iteration", f"iteration {it.iteration} does not follow {last}")
        last = it.iteration
        _known(r, [g.param for g in it.grad_ready], known, f"{path}.iterations[{j}].grad_ready")
        while layout + 1 < len(rank.layouts) and rank.layouts[layout + 1].from_iteration <= it.iteration:
            layout += 1  # the layout in force at this iteration (both lists are in iteration order)
        count = len(rank.layouts[layout].buckets) if rank.layouts else 0
        for k, b in enumerate(it.buckets):
            if count and not 0 <= b.bucket < count:
                r.fail(f"{path}.iterations[{j}].buckets[{k}].bucket",
                       f"bucket {b.bucket} is not in the layout in force ({count} buckets)")


def _known(r, params: list[int], known: set | None, path: str) -> None:
    if known is not None:
        missing = [p for p in params if p not in known]
        if missing:
            r.fail(path, f"parameter {missing[0]} is not in params")
