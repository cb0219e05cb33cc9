"""Join per-rank shards into one trace.

Each rank writes a JSON Lines shard (see events.py). ``python -m ddpsim record``
merges them itself; after a ``torchrun`` run, across nodes, gather the shards and
run ``python -m ddpsim merge run.json.rank*.jsonl --out run.json``.

Merging puts every rank on rank 0's clock (subtracting each rank's estimated
offset) and moves the origin to the first forward of the run. A shard that ends
without its ``end`` line belongs to a rank that failed or was stopped: it is kept,
and marked incomplete.
"""
from __future__ import annotations

import json
from pathlib import Path

from ddpsim.errors import CLIError
from ddpsim.trace import VERSION
from ddpsim.trace.same_run import apart, ranks_text
from ddpsim.trace.writer import write_trace_dict

HELP = "join per-rank shards (from torchrun) into one trace"
RUN_KEYS = ("world_size", "model", "impl", "backend", "options")  # what every rank of one run records alike
ONE_RUN = "merge one run's shards (each node's run.json.rank*.jsonl of the same torchrun job)"
# times on a rank's clock, shifted onto rank 0's; durations (a hook's compress_ns, decompress_ns) are not
TIME_KEYS = ("start_ns", "end_ns", "t_ns", "ready_ns", "launch_ns", "complete_ns", "launch_end_ns",
             "cpu_t_ns", "cpu_launch_ns", "cpu_complete_ns")


def empty_shard(path: str | Path, rank: int | None = None) -> dict:
    """A shard with nothing in it: what ``read_shard`` fills, or all there is of a rank that wrote nothing."""
    return {"header": {} if rank is None else {"rank": rank}, "layouts": [], "iterations": [], "shadows": [],
            "join": None, "end": None, "error": None, "path": str(path)}


def read_shard(path: str | Path) -> dict:
    """A shard's lines gathered by kind. A truncated last line (a crash mid-write) is dropped."""
    shard = empty_shard(path)
    lines = Path(path).read_text().splitlines()
    for n, line in enumerate(lines):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if n == len(lines) - 1:
                break  # the rank died while writing this line
            raise CLIError(f"{path}: line {n + 1} is not JSON; is this a ddpsim shard?") from None
        kind = obj.pop("kind", None)
        if kind in ("header", "header_update"):
            shard["header"].update(obj)
        elif kind == "layout":
            shard["layouts"].append({"from_iteration": obj["from_iteration"],
                                     "kind": obj["layout_kind"], "buckets": obj["buckets"]})
        elif kind == "iteration":
            shard["iterations"].append(obj)
        elif kind == "shadow":
            shard["shadows"].append(obj)
        elif kind == "join":
            shard["join"] = obj
        elif kind == "end":
            shard["end"] = obj
        elif kind == "error":
            shard["error"] = obj["error"]
    if "rank" not in shard["header"]:
        what = "is empty" if not lines else "has no header line (cut off, or not a ddpsim shard)"
        raise CLIError(f"{path} {what}: a rank's shard starts with its header; is this a ddpsim shard?")
    return shard


def _shift(obj, delta: int):
    """Add ``delta`` to every time field, recursively."""
    if isinstance(obj, dict):
        return {k: (v + delta if k in TIME_KEYS and isinstance(v, int) else _shift(v, delta))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [_shift(x, delta) for x in obj]
    return obj


def first_forward_ns(shards: list[dict]) -> int | None:
    """The earliest first-forward start over the shards, on rank 0's clock: the run's origin."""
    starts = [it["forward"]["start_ns"] - s["header"].get("clock", {}).get("offset_ns", 0)
              for s in shards for it in s["iterations"][:1]]
    return min(starts) if starts else None


def merge(shards: list[dict], notes: dict[int, str] | None = None, origin_ns: int | None = None) -> dict:
    """Shards -> trace dict. ``notes``: rank -> why it stopped (from the launcher).

    ``origin_ns``: the time that becomes 0 (default: this run's first forward); runs
    recorded together pass a shared origin so that their times line up.
    """
    shards = sorted(shards, key=lambda s: s["header"]["rank"])
    ranks = [s["header"]["rank"] for s in shards]
    if len(set(ranks)) != len(ranks):
        raise CLIError(f"two shards claim the same rank: ranks {ranks}")
    head = max((s["header"] for s in shards), key=len)  # a rank that wrote nothing has a bare header
    offsets = {s["header"]["rank"]: s["header"].get("clock", {}).get("offset_ns", 0) for s in shards}
    origin = origin_ns if origin_ns is not None else (first_forward_ns(shards) or 0)
    out_ranks = []
    for s in shards:
        h, r = s["header"], s["header"]["rank"]
        delta = -offsets[r] - origin
        error = s["error"] or (notes or {}).get(r)
        if s["end"] is None and error is None:
            error = "stopped before finishing"
        out_ranks.append({
            "rank": r, "host": h.get("host", ""), "pid": h.get("pid"), "clock_offset_ns": offsets[r],
            "complete": s["end"] is not None and s["error"] is None, "error": error,
            "layouts": _shift(s["layouts"], delta), "iterations": _shift(s["iterations"], delta),
            "ddp_logging_data": (s["end"] or {}).get("ddp_logging_data"),
            **({"join": _shift({**s["join"], "shadows": s["shadows"]}, delta)} if s["join"] else {}),
        })
    world = head.get("world_size", len(shards))
    missing = sorted(set(range(world)) - set(ranks))
    meta = {k: head[k] for k in ("torch_version", "python_version", "backend", "world_size", "impl",
                                 "model", "options", "config", "created", "command", "pinning", "allreduce_probe",
                                 "placement", "gpu", "timebase", "turns", "buffer_bytes", "hook_rates")
            if k in head}
    meta["hosts"] = sorted({s["header"].get("host", "") for s in shards})
    clocks = [s["header"].get("clock", {}) for s in shards]
    meta["clock"] = {"method": clocks[0].get("method", "unknown"),
                     "skew_ns": max((c.get("skew_ns", 0) for c in clocks), default=0),
                     "offsets_ns": offsets}
    if missing:
        meta["missing_ranks"] = missing
    return {"format": "ddpsim-trace", "version": VERSION, "source": "real", "meta": meta,
            "params": head.get("params", []), "ranks": out_ranks}


def merge_files(paths: list[str | Path], out: str | Path, notes: dict[int, str] | None = None,
                origin_ns: int | None = None):
    """Read shards, merge, check the result loads, write it. Returns the Trace."""
    return write_trace_dict(merge([read_shard(p) for p in paths], notes, origin_ns), out)


def add_arguments(p) -> None:
    p.add_argument("shards", nargs="+", help="per-rank shard files (run.json.rank*.jsonl)")
    p.add_argument("--out", required=True, help="the merged trace to write")


def one_run(shards: list[dict], ranks: list[dict]) -> None:
    """``ddpsim merge``'s check that the shards gathered are one run's: every rank records the same
    world size, model and DDP options, and its synchronised iterations overlap the others' on rank
    0's clock (Note [One job's ranks overlap in every synchronised step] in ddpsim/trace/same_run.py;
    not under the noop hook, which does not communicate). One CLIError naming the shards otherwise."""
    written = [s for s in shards if len(s["header"]) > 1]  # a rank that wrote nothing has a bare header
    for s in written[1:]:
        if (diff := _difference(written[0]["header"], s["header"])) is not None:
            what, first, this = diff
            raise CLIError(f"{s['path']} records {what} {this!r} but {written[0]['path']} {first!r}: "
                           f"shards of different runs; {ONE_RUN}")
    if written and (written[0]["header"].get("options") or {}).get("comm_hook") == "noop":
        return
    if (gap := apart(ranks)) is not None:
        raise CLIError(f"iteration {gap[0]} does not overlap across the shards' ranks (one rank's starts "
                       f"{gap[1] / 1e9:.3f} s after another's ends on rank 0's clock), as one run's ranks always "
                       f"do: shards of different runs; {ONE_RUN}")


def _difference(a: dict, b: dict) -> tuple[str, object, object] | None:
    """The first of ``RUN_KEYS`` (an option by its name) on which two shard headers differ."""
    for key in RUN_KEYS:
        x, y = a.get(key), b.get(key)
        if x != y and isinstance(x, dict) and isinstance(y, dict):
            name = next(k for k in sorted({*x, *y}) if x.get(k) != y.get(k))
            return f"{key}.{name}", x.get(name), y.get(name)
        if x != y:
            return key, x, y
    return None


def main(args) -> int:
    for path in args.shards:
        if not Path(path).is_file():
            raise CLIError(f"shard {path} does not exist")
    shards = [read_shard(p) for p in args.shards]
    raw = merge(shards)
    one_run(shards, raw["ranks"])
    trace = write_trace_dict(raw, args.out)
    missing = trace.meta.get("missing_ranks") or []
    state = "complete" if trace.complete and not missing else "INCOMPLETE"
    if missing:
        state += f": no shard of rank(s) {ranks_text(missing)} of world size {trace.meta['world_size']}"
    print(f"merged {len(trace.ranks)} shard(s) into {args.out} ({state})")
    return 0
