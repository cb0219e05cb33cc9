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

from pathlib import Path

from ddpsim.errors import CLIError
from ddpsim.trace import VERSION
from ddpsim.trace.checks import MAX_WORLD_SIZE
from ddpsim.trace.jsontext import loads_limited
from ddpsim.trace.reader import MAX_TRACE_BYTES, _Reader
from ddpsim.trace.same_run import apart, ranks_text
from ddpsim.trace.types import TraceFormatError
from ddpsim.trace.writer import refuse_empty, refuse_input, write_trace_dict

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
    """A shard's lines gathered by kind, each checked for the fields ``merge`` reads (Note [A shard
    is read strictly]). A last line cut off mid-write (a crash; the writer is line-buffered, so
    it has no newline) is dropped."""
    shard = empty_shard(path)
    lines = _shard_text(path).split("\n")
    cut = lines[-1] != ""  # the text does not end with a newline: its last line was being written
    if not cut:
        lines.pop()
    for n, line in enumerate(lines, 1):
        where = f"{path}: line {n}"
        if (obj := _parse_line(line, where, cut and n == len(lines))) is None:
            break
        try:
            _take(shard, obj, where)
        except TraceFormatError as e:
            raise CLIError(f"{e}; is this a ddpsim shard?") from None
        except (KeyError, TypeError, AttributeError, IndexError) as e:  # a net under the checks
            raise CLIError(f"{where}: unexpected content ({type(e).__name__}: {e}); is this a ddpsim shard?") from None
    header = shard["header"]
    if "rank" not in header:
        what = "is empty" if not lines else "has no header line (cut off, or not a ddpsim shard)"
        raise CLIError(f"{path} {what}: a rank's shard starts with its header; is this a ddpsim shard?")
    if header["rank"] >= header.get("world_size", MAX_WORLD_SIZE):
        raise CLIError(f"{path}: rank {header['rank']} is not below its world_size {header['world_size']}")
    return shard


# Note [A shard is read strictly]: shards come from other machines (gathered after a torchrun job), so
# a shard is checked as a trace is (Note [A strict reader] in ddpsim/trace/reader.py): the file's size,
# each line's nesting depth and integers are bounded before it is parsed, each line must be a JSON
# object, and the fields merge itself reads (the header's rank, world_size, host, clock and options; a
# layout's, iteration's and error's fields) are type-checked where they are read. Every problem is
# one CLIError naming the file and line; what merge only copies is checked when the merged trace is
# read back before it is written (``write_trace_dict``).
HEADER_FIELDS = {  # key -> (type, lowest, highest); only options may be null
    "rank": (int, 0, MAX_WORLD_SIZE - 1), "world_size": (int, 1, MAX_WORLD_SIZE), "host": (str, None, None),
    "clock": (dict, None, None), "options": (dict, None, None), "params": (list, None, None),
}


def _shard_text(path: str | Path) -> str:
    """A shard's text, refused past the size of the largest trace ddpsim reads, or if not UTF-8."""
    size = Path(path).stat().st_size
    if size > MAX_TRACE_BYTES:
        raise CLIError(f"{path} is {size / 2**20:.0f} MiB; a shard holds at most {MAX_TRACE_BYTES / 2**20:.0f} "
                       "MiB (the largest trace ddpsim reads)")
    try:
        return Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise CLIError(f"{path} is not UTF-8 text, so not a ddpsim shard") from None


def _parse_line(line: str, where: str, last_cut: bool) -> dict | None:
    """One shard line as a JSON object, parsed within the trace reader's limits; None for a last
    line cut off mid-write (``last_cut``)."""
    try:
        obj = loads_limited(line, where)
    except TraceFormatError as e:
        if last_cut:
            return None  # the rank died while writing this line
        raise CLIError(f"{str(e).replace(' at line 1, column ', ' at column ')}; is this a ddpsim shard?") from None
    if not isinstance(obj, dict):
        raise CLIError(f"{where} is {line.strip()[:40]}, not a JSON object: each line of a ddpsim shard is one")
    return obj


def _take(shard: dict, obj: dict, where: str) -> None:
    """File one parsed line into ``shard`` by its kind, checking the fields merge reads of it."""
    r, kind = _Reader(where), obj.pop("kind", None)
    if kind in ("header", "header_update"):
        for key, (typ, lo, hi) in HEADER_FIELDS.items():
            if key in obj and obj[key] is None and key != "options":
                r.fail(key, "should not be null")
            r.value(obj, key, typ, "", optional=kind == "header_update" or key != "rank", lo=lo, hi=hi)
        for key in ("offset_ns", "skew_ns"):
            r.value(obj.get("clock") or {}, key, int, "clock", optional=True)
        shard["header"].update(obj)
    elif kind == "layout":
        shard["layouts"].append({"from_iteration": r.count(obj, "from_iteration", ""),
                                 "kind": r.get(obj, "layout_kind", str, ""), "buckets": r.get(obj, "buckets", list, "")})
    elif kind == "iteration":
        r.count(obj, "iteration", "")  # what same_run.apart reads of a step before the trace is read back
        r.value(obj, "sync", bool, "", optional=True)
        for key in ("forward", "backward", "optimizer"):
            if (span := r.get(obj, key, dict, "", optional=key == "optimizer")) is not None:
                r.value(span, "start_ns", int, key), r.value(span, "end_ns", int, key)
        shard["iterations"].append(obj)
    elif kind == "shadow":
        shard["shadows"].append(obj)
    elif kind in ("join", "end"):
        if kind == "join":
            r.value(obj, "start_ns", int, ""), r.value(obj, "end_ns", int, "")
        r.get(obj, "ddp_logging_data", dict, "", optional=True)
        shard[kind] = obj
    elif kind == "error":
        shard["error"] = r.get(obj, "error", str, "")


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
    world = head.get("world_size", len(shards))  # at most MAX_WORLD_SIZE (read_shard)
    bounds = [-1, *(r for r in ranks if r < world), world]  # ranks are sorted: the gaps are the missing
    missing = [m for a, b in zip(bounds, bounds[1:]) for m in range(a + 1, b)]
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
    refuse_empty(args.out, "--out")
    refuse_input(args.out, args.shards)  # a shard replaced by the merge
    for path in args.shards:
        if Path(path).is_dir():
            raise CLIError(f"shard {path} is a folder, not a shard file (run.json.rank<R>.jsonl)")
        if not Path(path).is_file():
            raise CLIError(f"shard {path} does not exist" if not Path(path).exists() else
                           f"shard {path} is not a regular file (a shard is read whole, from a file)")
    shards = [read_shard(p) for p in args.shards]
    raw = merge(shards)
    one_run(shards, raw["ranks"])
    trace = write_trace_dict(raw, args.out)
    missing = trace.meta.get("missing_ranks") or []
    why = [f"rank {r.rank} {(r.error or 'did not finish').splitlines()[0][:100]}"
           for r in trace.ranks if not r.complete]
    why += [f"no shard of rank(s) {ranks_text(missing)} of world size {trace.meta['world_size']}"] if missing else []
    state = "complete" if trace.complete and not why else "INCOMPLETE" + ": " * bool(why) + "; ".join(why)
    print(f"merged {len(trace.ranks)} shard(s) into {args.out} ({state})")
    return 0
