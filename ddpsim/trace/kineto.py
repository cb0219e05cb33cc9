"""Reading one PyTorch-profiler (Kineto) Chrome trace: the events, indexed for DDP questions.

``torch.profiler``'s ``export_chrome_trace`` and ``tensorboard_trace_handler`` write one JSON
file per rank (optionally gzipped): ``{"traceEvents": [...], "distributedInfo": {...},
"deviceProperties": [...], ...}``. Times (``ts``, ``dur``) are microseconds on one timeline:
CPU events on the host's clock, GPU events (``cat`` kernel, gpu_memcpy, gpu_memset) converted
onto it by Kineto. A GPU op carries ``args.correlation``, the id of the CUDA runtime call
(``cat`` cuda_runtime, on a CPU thread) that launched it; ``ac2g`` flow events draw the same link.

Note [GPU completion from a profile]: a CUDA stream runs its work in launch order, so "all work
this CPU thread had queued on the compute stream by CPU time t is done" happens at the latest
end among the ops launched before t, or at t itself if the stream had already drained. That is
exactly what a CUDA event recorded at t measures, so ``Profile.done_by`` is the GPU time of an
event recorded at t: a gradient-ready hook's CUDA event, or the end of the forward.

Note [A span starts when its call does]: the forward and the optimizer start at ``done_by`` of
their call's CPU start (``DistributedDataParallel.forward``, ``Optimizer.step``), as a CUDA event
recorded just before the call does, not at the GPU start of their first kernel: while DDP's
forward is being launched the GPU sits idle, and that time is the forward's. From the first
kernel, every forward of the H100 profiles was 0.5-1.6 ms (3-10%) shorter than the CUDA events
recorded around it; from the call, within 0.02-0.17 ms.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from pathlib import Path

from ddpsim.trace import MAX_TRACE_BYTES, TraceFormatError
from ddpsim.trace.jsontext import GZIP_MAGIC, PROFILE_HINT, gunzip_limited, loads_limited
from ddpsim.trace.profile_job import event, header, shown

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# what HTA 0.5.0 does not count as computation (hta/utils/utils.py, get_kernel_type: its communication,
# memory and not-compute patterns): NCCL's kernels, copies, memsets, DMA and syncs; every other GPU op
# is compute (Note [Compute is the GPU's busy kernels] in ddpsim/analysis/metrics.py)
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(^dma)|(.*(Memcpy)|(Memset))|(.*Sync)")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
MAX_US = 2**62 / 1000  # |ts|, |dur| (us): their sum in ns fits a ddpsim trace's int64 (ts: 2116 since the epoch)
NOT_JSON = "is not a JSON (or gzipped JSON) profiler trace"


def read_profile(path: str | Path) -> dict:
    """The JSON of a Kineto trace (.json or .json.gz), read within the trace reader's limits (Note [A
    strict reader] in reader.py: ``MAX_TRACE_BYTES`` of text, gzipped or not, the nesting depth, int64
    integers, finite numbers); TraceFormatError names what is wrong, in one line."""
    path, name = Path(path), str(path)
    try:
        if (size := path.stat().st_size) > MAX_TRACE_BYTES:
            raise TraceFormatError(f"{path} is {size / 2**20:.0f} MiB; the limit is {MAX_TRACE_BYTES / 2**20:.0f} MiB")
        raw = path.read_bytes()
        text = (gunzip_limited(raw, MAX_TRACE_BYTES, name) if raw[:2] == GZIP_MAGIC else raw).decode("utf-8")
        if not text.strip():  # as the trace reader says it
            raise TraceFormatError(f"{name} is empty")
        data = loads_limited(text, name, unique_keys=False)  # Note [One key, one value]
    except OSError as e:
        raise TraceFormatError(f"cannot read profile {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path} {NOT_JSON}: it is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except TraceFormatError as e:  # the trace reader's words, but its hint is to run import, which this is
        why = str(e).replace(f"; {PROFILE_HINT}", "")
        if why.startswith(tuple(f"{name} is {broken}" for broken in ("not valid JSON", "not a valid gzip", "truncated"))):
            why = f"{name} {NOT_JSON}: it {why[len(name) + 1:]}"  # broken text, where the others are limits
        raise TraceFormatError(why) from None
    if isinstance(data, dict) and data.get("format") == "ddpsim-trace":
        raise TraceFormatError(f"{path} is already a ddpsim trace; open it directly")
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceFormatError(f"{path} is not a PyTorch profiler trace (no traceEvents list)")
    return data


@dataclass
class Op:
    """A complete ("X") event."""

    name: str
    cat: str
    pid: object
    tid: object
    start: float  # us
    end: float  # us
    args: dict = field(default_factory=dict)

    def within(self, other: "Op") -> bool:
        return other.start <= self.start and self.end <= other.end + 1e-3


def _op(e: dict, i: int, name: str) -> Op:
    """``traceEvents[i]``, a complete event, as an Op; a field read of the wrong type (times, thread, args,
    a GPU link's correlation) is a TraceFormatError naming the file and the field, a negative duration one
    naming the file and the event."""
    def bad(key: str, what: str, value) -> TraceFormatError:
        return TraceFormatError(f"{name}: traceEvents[{i}].{key} should be {what}, not {shown(value)}")
    args, cat, ts, dur = {} if e.get("args") is None else e["args"], str(e.get("cat", "")), e["ts"], e.get("dur", 0)
    if not isinstance(args, dict):
        raise bad("args", "an object", args)
    for key in ("pid", "tid"):
        if isinstance(e.get(key), (list, dict)):
            raise bad(key, "a number or a string", e[key])
    for key, t in (("ts", ts), ("dur", dur)):
        if type(t) not in (int, float) or not abs(t) <= MAX_US:
            raise bad(key, f"a number of microseconds within +-{MAX_US:.3g}", t)
    if dur < 0:  # an event ending before it starts: no profiler writes one, and no span can be built on it
        raise TraceFormatError(f"{name}: traceEvents[{i}], {event(e.get('name'), ts)}, has a negative duration "
                               f"(dur {shown(dur)} us)")
    link = args.get("correlation")
    if cat in GPU_CATS + RUNTIME_CATS and link is not None and type(link) is not int:
        raise bad("args.correlation", "an integer", link)
    return Op(str(e.get("name", "")), cat, e.get("pid"), e.get("tid"), float(ts), float(ts) + float(dur), args)


class Profile:
    """One rank's profile, indexed: CPU ops by thread, GPU ops by stream and by launching call."""

    def __init__(self, data: dict, name: str = "profile"):
        self.name = name
        self.info, self.devices = header(data, name)  # checked: ddpsim.trace.profile_job
        other = data.get("otherData")
        self.from_ddpsim = isinstance(other, dict) and other.get("exported_by") == "ddpsim"  # export --chrome
        self.cpu: list[Op] = []
        self.gpu: list[Op] = []
        self.runtime: dict[int, Op] = {}  # correlation id -> the runtime call
        for i, e in enumerate(data["traceEvents"]):
            if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
                continue
            op = _op(e, i, name)
            if op.cat in GPU_CATS:
                self.gpu.append(op)
            elif op.cat in RUNTIME_CATS:
                if "correlation" in op.args:
                    self.runtime[op.args["correlation"]] = op
            elif op.cat not in ("gpu_user_annotation", "Trace"):
                self.cpu.append(op)
        self.cpu.sort(key=lambda o: o.start)
        self.gpu.sort(key=lambda o: o.start)
        self.compute_stream = self._busiest_stream()
        self._launched = self._launch_index()
        self._busy = self._compute_busy()
        # Note [A profile is indexed once]: every lookup below is a dictionary and a binary search,
        # never a scan of the whole profile per step or per collective, so importing is linear-log
        # in the profile's length (a profile may hold many steps: benchmarks/bench_import.py).
        self._by_name: dict[str, list[Op]] = {}
        for o in self.cpu:  # in start order
            self._by_name.setdefault(o.name, []).append(o)
        self._index: dict[tuple[str, bool], tuple[list[Op], list[float]]] = {}
        self._gpu_of: dict[object, list[Op]] = {}  # correlation id -> the GPU ops it launched
        for g in self.gpu:
            self._gpu_of.setdefault(g.args.get("correlation"), []).append(g)
        self._calls: dict[object, tuple[list[Op], list[float]]] = {}  # thread -> its runtime calls
        for call in sorted(self.runtime.values(), key=lambda c: c.start):
            calls, starts = self._calls.setdefault(call.tid, ([], []))
            calls.append(call)
            starts.append(call.start)

    # -- lookups ---------------------------------------------------------------------------
    def _ops(self, name: str, prefix: bool) -> tuple[list[Op], list[float]]:
        """The CPU ops called ``name`` (or starting with it), in start order, and their starts."""
        key = (name, prefix)
        if key not in self._index:
            ops = ([o for n, group in self._by_name.items() if n.startswith(name) for o in group] if prefix
                   else self._by_name.get(name, []))
            ops = sorted(ops, key=lambda o: o.start) if prefix else ops
            self._index[key] = (ops, [o.start for o in ops])
        return self._index[key]

    def starting(self, name: str, lo: float, hi: float, prefix: bool = False) -> list[Op]:
        """The CPU ops called ``name`` (``prefix``: starting with it) that start within [lo, hi]."""
        ops, starts = self._ops(name, prefix)
        return ops[bisect.bisect_left(starts, lo):bisect.bisect_right(starts, hi)]

    def named(self, name: str, within: Op | None = None, prefix: bool = False) -> list[Op]:
        """The CPU ops called ``name`` (``prefix``: starting with it), all or those ``within`` an op."""
        if within is None:
            return list(self._ops(name, prefix)[0])
        return [o for o in self.starting(name, within.start, within.end, prefix) if o.within(within)]

    def launched_by(self, op: Op) -> list[Op]:
        """GPU ops launched by runtime calls on ``op``'s thread during ``op``, in start order."""
        calls, starts = self._calls.get(op.tid, ([], []))
        lo, hi = bisect.bisect_left(starts, op.start), bisect.bisect_right(starts, op.end)
        out = [g for call in calls[lo:hi] for g in self._gpu_of.get(call.args["correlation"], [])]
        return sorted(out, key=lambda g: g.start)

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu)

    def _busiest_stream(self):
        counts: dict = {}
        for g in self.gpu:
            if g.cat == "kernel":
                counts[g.tid] = counts.get(g.tid, 0) + 1
        return max(counts, key=counts.get) if counts else None

    def _launch_index(self):
        """Compute-stream ops as (launch call start, running max of GPU end), by launch time."""
        rows = []
        for g in self.gpu:
            call = self.runtime.get(g.args.get("correlation"))
            if g.tid == self.compute_stream and call is not None:
                rows.append((call.start, g.end))
        rows.sort()
        starts, ends, latest = [], [], float("-inf")
        for s, e in rows:
            latest = max(latest, e)
            starts.append(s)
            ends.append(latest)
        return starts, ends

    def _compute_busy(self) -> list[tuple[float, float]]:
        """The compute ops' (``NOT_COMPUTE``) time on any stream, merged into disjoint spans (us)."""
        out: list[list[float]] = []
        for g in self.gpu:  # sorted by start
            if NOT_COMPUTE.match(g.name):
                continue
            if out and g.start <= out[-1][1]:
                out[-1][1] = max(out[-1][1], g.end)
            else:
                out.append([g.start, g.end])
        return [(a, b) for a, b in out]

    def compute_busy(self, lo: float, hi: float) -> list[tuple[float, float]]:
        """The GPU's compute busy spans within [lo, hi] (us), clipped, in time order."""
        busy, out = self._busy, []
        k = max(0, bisect.bisect_right(busy, (lo, float("inf"))) - 1)
        while k < len(busy) and busy[k][0] < hi:  # no copy of the rest: a profile may hold many steps
            if busy[k][1] > lo:
                out.append((max(busy[k][0], lo), min(busy[k][1], hi)))
            k += 1
        return out

    def done_by(self, t_cpu: float) -> float:
        """GPU time (us) when the compute-stream work launched before CPU time ``t_cpu`` is done
        (Note [GPU completion from a profile]); ``t_cpu`` itself without GPU events."""
        starts, ends = self._launched
        k = bisect.bisect_left(starts, t_cpu)
        return max(ends[k - 1], t_cpu) if k else t_cpu


def pair_gloo_runs(launches: list[Op], runs: list[Op]) -> list[Op | None]:
    """Each collective launch's ``gloo:all_reduce`` run (None where the profile has none): the first
    unpaired run of the launch's shape that starts after it. gloo runs collectives on a pool of threads
    (two by default), so runs need not start in launch order: a used-parameter map of 4 ints was run
    before the 544-float bucket launched just ahead of it (torch 2.13, find_unused_parameters).

    A launch's candidates: a suffix (binary search) of the runs, sorted once, of its shape or of none
    (``_Free``): n log n, where a scan of the unpaired runs per launch took 36 s for 32,000 in a step."""
    runs = sorted(runs, key=lambda o: o.start)
    starts, every, shapes, by_shape, out = [r.start for r in runs], _Free(range(len(runs))), [], {}, []
    for i, r in enumerate(runs):
        dims = r.args.get("Input Dims")  # gloo:all_reduce: [shape of each tensor]
        shapes.append(_frozen(dims[0]) if isinstance(dims, list) and dims else None)
        by_shape.setdefault(shapes[-1], []).append(i)
    by_shape = {k: _Free(v) for k, v in by_shape.items()}
    for op in launches:
        dims = op.args.get("Input Dims")  # c10d::allreduce_: [[shape of each tensor], ...]
        want = dims[0][0] if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] else None
        after = bisect.bisect_left(starts, op.start)
        pools = [every] if want is None else [by_shape.get(_frozen(want)), by_shape.get(None)]
        firsts = [i for pool in pools if pool is not None and (i := pool.first(after)) is not None]
        k = min(firsts, default=None)  # the first of them, taken
        if k is not None:
            every.take(k)
            by_shape[shapes[k]].take(k)
        out.append(None if k is None else runs[k])
    return out


def _frozen(value):
    """A JSON value made hashable, equal (and hashing alike) exactly where the values are ``==``."""
    if isinstance(value, dict):
        return frozenset((k, _frozen(v)) for k, v in value.items())
    return tuple(map(_frozen, value)) if isinstance(value, list) else value


class _Free:
    """Sorted run indices, each taken at most once: the first not taken at or after an index is a binary
    search and a walk of next-free pointers, halved as it goes (a union-find), log n amortised."""

    def __init__(self, indices):
        self.indices, self.next = list(indices), list(range(len(indices) + 1))

    def first(self, index: int) -> int | None:
        q, nxt = bisect.bisect_left(self.indices, index), self.next
        while nxt[q] != q:
            nxt[q] = nxt[nxt[q]]
            q = nxt[q]
        return self.indices[q] if q < len(self.indices) else None

    def take(self, index: int) -> None:
        q = bisect.bisect_left(self.indices, index)
        self.next[q] = q + 1
