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
import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ddpsim.buckets import SCALAR_TYPES
from ddpsim.trace import TraceFormatError
from ddpsim.trace.jsontext import GZIP_MAGIC

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
# what HTA 0.5.0 does not count as computation (hta/utils/utils.py, get_kernel_type: its communication,
# memory and not-compute patterns): NCCL's kernels, copies, memsets, DMA and syncs; every other GPU op
# is compute (Note [Compute is the GPU's busy kernels] in ddpsim/analysis/metrics.py)
NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(^dma)|(.*(Memcpy)|(Memset))|(.*Sync)")
DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
               "float64": 8, "int": 4, "int32": 4, "long": 8, "long int": 8, "int64": 8}


def read_profile(path: str | Path) -> dict:
    """The JSON of a Kineto trace (.json or .json.gz); TraceFormatError names what is wrong."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        if raw[:2] == GZIP_MAGIC:
            raw = gzip.decompress(raw)
        data = json.loads(raw)
    except OSError as e:
        raise TraceFormatError(f"cannot read profile {path}: {e.strerror or e}") from None
    except (ValueError, EOFError, zlib.error) as e:  # zlib.error: a corrupt gzip stream
        raise TraceFormatError(f"{path} is not a JSON (or gzipped JSON) profiler trace: {e}") from None
    if isinstance(data, dict) and data.get("format") == "ddpsim-trace":
        raise TraceFormatError(f"{path} is already a ddpsim trace; open it directly")
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise TraceFormatError(f"{path} is not a PyTorch profiler trace (no traceEvents list)")
    return data


def profile_files(paths: list[str | Path]) -> list[Path]:
    """The profiles named, a folder standing for its ``*.json`` / ``*.json.gz`` files (as
    ``tensorboard_trace_handler`` writes one per rank into a log folder)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.name.endswith((".json", ".json.gz")))
            if not found:
                raise TraceFormatError(f"folder {p} holds no .json or .json.gz profiler traces")
            out += found
        else:
            out.append(p)
    return out


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


class Profile:
    """One rank's profile, indexed: CPU ops by thread, GPU ops by stream and by launching call."""

    def __init__(self, data: dict, name: str = "profile"):
        self.name = name
        self.info = data.get("distributedInfo") or {}
        self.devices = data.get("deviceProperties") or []
        other = data.get("otherData")
        self.from_ddpsim = isinstance(other, dict) and other.get("exported_by") == "ddpsim"  # export --chrome
        self.cpu: list[Op] = []
        self.gpu: list[Op] = []
        self.runtime: dict[int, Op] = {}  # correlation id -> the runtime call
        for e in data["traceEvents"]:
            if not isinstance(e, dict) or e.get("ph") != "X" or "ts" not in e:
                continue
            try:
                op = Op(str(e.get("name", "")), str(e.get("cat", "")), e.get("pid"), e.get("tid"),
                        float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0)), e.get("args") or {})
            except (TypeError, ValueError):
                continue
            if op.cat in GPU_CATS:
                self.gpu.append(op)
            elif op.cat in ("cuda_runtime", "cuda_driver"):
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


def collective_bytes(op: Op, profile: Profile) -> tuple[int | None, str]:
    """(bytes, where they came from) of a ``c10d::allreduce_``: NCCL's ``record_param_comms``
    (``In msg nelems`` x the dtype's size) inside it, present without ``record_shapes``; else its
    ``Input Dims`` (record_shapes) as float32; else (None, "unknown")."""
    for inner in profile.named("record_param_comms", within=op):
        n = inner.args.get("In msg nelems")
        if isinstance(n, int) and not isinstance(n, bool):
            return n * DTYPE_BYTES.get(str(inner.args.get("dtype", "float")).lower(), 4), "nccl metadata"
    dims = op.args.get("Input Dims")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and isinstance(dims[0][0], list):
        numel = 1
        for d in dims[0][0]:
            numel *= int(d)
        return numel * 4, "profile shapes"
    return None, "unknown"


def tensor_shape(op: Op) -> tuple[list[int] | None, str]:
    """(shape, dtype) of an op's first input, from record_shapes' ``Input Dims`` / ``Input type``."""
    dims, types = op.args.get("Input Dims"), op.args.get("Input type")
    shape = dims[0] if isinstance(dims, list) and dims and isinstance(dims[0], list) else None
    if shape is not None and not all(isinstance(d, int) for d in shape):
        shape = None
    dtype = str(types[0]) if isinstance(types, list) and types else "float"
    dtype = {"float": "float32", "half": "float16", "double": "float64",
             "c10::bfloat16": "bfloat16", "c10::half": "float16"}.get(dtype.lower(), dtype.lower())
    return shape, dtype if dtype in SCALAR_TYPES else "float32"  # a type the profile names oddly


def pair_gloo_runs(launches: list[Op], runs: list[Op]) -> list[Op | None]:
    """Each collective launch's ``gloo:all_reduce`` run (None where the profile has none): the first
    unpaired run of the launch's shape that starts after it. gloo runs collectives on a pool of threads
    (two by default), so runs need not start in launch order: a used-parameter map of 4 ints was run
    before the 544-float bucket launched just ahead of it (torch 2.13, find_unused_parameters)."""
    free, out = sorted(runs, key=lambda o: o.start), []
    for op in launches:
        dims = op.args.get("Input Dims")  # c10d::allreduce_: [[shape of each tensor], ...]
        want = dims[0][0] if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] else None
        match = next((r for r in free if r.start >= op.start
                      and (want is None or (r.args.get("Input Dims") or [None])[0] in (None, want))), None)
        if match is not None:
            free.remove(match)
        out.append(match)
    return out


def is_bitmap(op: Op, profile: Profile | None = None, gloo_run: Op | None = None) -> bool:
    """find_unused_parameters' used-parameter map: an int32 allreduce (reducer.cpp local_used_map_),
    by its input type (record_shapes: the collective's own, or gloo's run of it where the collective
    names only a ``TensorList``, as torch 2.13's profiler does) or NCCL's metadata dtype."""
    for o in (op, gloo_run):
        types = o.args.get("Input type") if o is not None else None
        if isinstance(types, list) and types and str(types[0]) != "TensorList":
            return "int" in str(types[0]).lower()
    meta = profile.named("record_param_comms", within=op) if profile is not None else []
    return any("int" in str(m.args.get("dtype", "")).lower() for m in meta[:1])


def params_from_ready_shapes(shapes: list[tuple]) -> list[dict]:
    """Parameters from the ready order: DDP index n-1-k for the k-th gradient ready (gradients
    arrive roughly in reverse definition order); names are not in a profile."""
    n = len(shapes)
    out = []
    for k in reversed(range(n)):
        shape, dtype = shapes[k]
        numel = 1
        for d in shape or []:
            numel *= d
        size = DTYPE_BYTES.get(dtype, 4)
        out.append({"index": n - 1 - k, "name": f"param{n - 1 - k}", "shape": list(shape or []),
                    "dtype": dtype, "bytes": numel * size if shape is not None else 0})
    return out
