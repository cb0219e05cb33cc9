"""Export a ddpsim trace in the PyTorch profiler's (Kineto) Chrome-trace shape.

Perfetto, chrome://tracing and HolisticTraceAnalysis (HTA) read it. Two forms:

- ``export --chrome TRACE OUT.json``: every rank in one file (a Perfetto view; documented
  multi-rank form): rank r's device is process ``r``, its host process ``HOST_PID + r``.
- ``export --chrome TRACE OUTDIR --per-rank``: one Kineto file per rank, ``OUTDIR/rank{r}.json``,
  each with its own ``distributedInfo`` (``{"backend", "rank", "world_size"}``), as
  ``tensorboard_trace_handler`` writes them; HTA's ``TraceAnalysis(trace_dir=OUTDIR)`` reads it.

Each file is written as it is made (``ddpsim.trace.export_write``), an iteration's events at a time: a long
recording's export needs about the memory its trace takes, not that of all its events.

Shape, per rank (Note [Kineto shape]):
- host process: ``ProfilerStep#N`` (user_annotation) around each iteration, the
  ``DistributedDataParallel.forward`` / ``Optimizer.step`` annotations, and one ``cudaLaunchKernel``
  (cuda_runtime) per device span, linked to it by ``args.correlation`` and an ``ac2g`` flow;
- device process, compute stream (tid ``COMPUTE_STREAM``): kernels ``ddpsim::forward``, one
  ``ddpsim::backward <param>`` per gradient (from the previous gradient's ready time to this
  one's), ``ddpsim::optimizer``; instants ``grad_ready`` and ``bucket_ready``;
- device process, communication streams (tid ``COMM_STREAM`` + lane, a lane per collective in
  flight so spans nest): one ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` kernel per bucket
  allreduce (named like NCCL's so HTA classifies it as communication; ``args.backend`` says
  which backend really ran it), the used-parameter bitmap likewise;
- flow arrows (cat ``ddp_grad_to_bucket``) from each gradient's ready time to its bucket's allreduce.

Note [Kineto shape]: HTA keeps a device kernel only if a host-side launch with the same
``correlation`` lies inside a ``ProfilerStep#N`` that is not the last one, and it finds the
rank with the regular expression ``"rank":\\s+(\\d+)``, so ``distributedInfo`` comes first and
JSON is written with ``": "`` separators. HTA also drops the last ``ProfilerStep``, so the export
ends with an empty one (``args.ddpsim: "closing marker"``) after the last iteration. Times are microseconds on the trace's one clock
(``meta.timebase`` says whether that is the GPU's or the host's).

Note [An export carries its trace]: whatever ddpsim writes, it reads back, and the Kineto shape
alone could not give the trace back whole (parameter names, layouts, every iteration when the
export keeps the steady ones). So the one-file export, and the lowest rank's file of the per-rank
form, carry the trace itself, every iteration, under the top-level key ``ddpsimTrace``
(``ddpsim.trace.CARRIED``), after ``traceEvents``; Perfetto, chrome://tracing and HTA ignore a key
they do not know. ``load_trace``, the app and ``ddpsim import`` read such a file as that trace.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ddpsim.analysis import steady_cycles
from ddpsim.trace import CARRIED, Trace, load_trace
from ddpsim.trace.export_write import Array, carried, chunks, whole, write_chunks, write_rank_files
from ddpsim.trace.writer import refuse_empty

HELP = "export a trace in the PyTorch profiler's Chrome-trace shape (Perfetto, HTA)"
COMPUTE_STREAM, COMM_STREAM = 7, 20  # device tids (Kineto: stream ids)
HOST_PID = 100_000  # host process of rank r in the multi-rank file: HOST_PID + r
HOST_TID = 1
NCCL_NAME = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def _us(ns: int) -> float:
    return ns / 1000.0


def _lanes(spans: list[tuple[int, int]]) -> list[int]:
    """Give overlapping spans different lanes so each track nests."""
    ends: list[int] = []
    lanes = []
    for start, end in spans:
        for lane, lane_end in enumerate(ends):
            if lane_end <= start:
                ends[lane] = end
                lanes.append(lane)
                break
        else:
            ends.append(end)
            lanes.append(len(ends) - 1)
    return lanes


class _RankWriter:
    """Builds one rank's events; ``gpu`` and ``host`` are its device and host pids."""

    def __init__(self, trace: Trace, rank, gpu: int, host: int, iterations: set[int] | None):
        self.trace, self.rank, self.gpu, self.host = trace, rank, gpu, host
        self.keep = iterations
        self.events: list[dict] = []
        # Large ids, as Kineto's: HTA stores correlations in the smallest int type that holds
        # them, then writes row numbers into that column (small ids overflow it).
        self.correlation = (rank.rank + 1) * 10_000_000
        self.flow = (rank.rank + 1) * 10_000_000
        self.backend = str(trace.meta.get("backend", "unknown"))
        self._group_of, self._group = None, ({}, [])  # _grouped's last iteration and its grouping

    def kernel(self, name: str, cat: str, tid: int, start_ns: int, end_ns: int, args: dict) -> None:
        """A device span plus its host launch and ac2g flow (Note [Kineto shape])."""
        c = self.correlation
        self.correlation += 1
        ts, dur = _us(start_ns), max(_us(end_ns - start_ns), 0.001)
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": self.gpu, "tid": tid, "ts": ts,
                            "dur": dur, "args": {"stream": tid, "device": 0, "correlation": c,
                                                 "ddpsim": cat, **args}})
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": self.host,
                            "tid": HOST_TID, "ts": ts, "dur": 0.001, "args": {"correlation": c}})
        for ph, pid, tid in (("s", self.host, HOST_TID), ("f", self.gpu, tid)):
            self.events.append({"ph": ph, "id": c, "pid": pid, "tid": tid, "ts": ts, "cat": "ac2g",
                                "name": "ac2g", **({"bp": "e"} if ph == "f" else {})})

    def compute(self, name: str, cat: str, it, start_ns: int, end_ns: int, args: dict) -> None:
        """Compute on the compute stream over [start, end]: one kernel, or an import's busy kernels in it
        (Note [Compute is the GPU's busy kernels] in ddpsim.analysis.metrics)."""
        for s, e in (it.busy(start_ns, end_ns) if it.compute_busy is not None else [(start_ns, end_ns)]):
            self.kernel(name, cat, COMPUTE_STREAM, s, e, args)

    def annotation(self, name: str, start_ns: int, end_ns: int, args: dict) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": self.host,
                            "tid": HOST_TID, "ts": _us(start_ns), "dur": _us(end_ns - start_ns), "args": args})

    def instant(self, name: str, cat: str, t_ns: int, args: dict) -> None:
        self.events.append({"ph": "i", "s": "t", "cat": cat, "name": name, "pid": self.gpu,
                            "tid": COMPUTE_STREAM, "ts": _us(t_ns), "args": args})

    def arrow(self, t_from: int, t_to: int, to_tid: int, args: dict) -> None:
        f = self.flow
        self.flow += 1
        self.events.append({"ph": "s", "id": f, "pid": self.gpu, "tid": COMPUTE_STREAM, "ts": _us(t_from - 1),
                            "cat": "ddp_grad_to_bucket", "name": "gradient -> bucket", "args": args})
        self.events.append({"ph": "f", "bp": "e", "id": f, "pid": self.gpu, "tid": to_tid, "ts": _us(t_to),
                            "cat": "ddp_grad_to_bucket", "name": "gradient -> bucket", "args": args})

    def batches(self) -> Iterator[list[dict]]:
        """This rank's events a batch at a time (Note [Kineto shape]): its metadata, which names the lanes its
        collectives take (found first, from their times alone), each iteration's, then its collectives'."""
        iters = [it for it in self.rank.iterations if self.keep is None or it.iteration in self.keep]
        comm = sorted(((c.launch_ns, c.complete_ns, k, c) for k, it in enumerate(iters)  # stable: as made
                       for c in it.buckets + ([it.bitmap_allreduce] if it.bitmap_allreduce else [])
                       if c.complete_ns > c.launch_ns), key=lambda c: c[0])  # no GPU work (NCCL on one rank): none
        lanes = _lanes([(c[0], c[1]) for c in comm])
        yield self._metadata({COMM_STREAM + lane for lane in lanes} | {COMM_STREAM})
        for k, it in enumerate(iters):
            step_end = iters[k + 1].forward.start_ns if k + 1 < len(iters) else it.end_ns
            self.annotation(f"ProfilerStep#{it.iteration}", it.forward.start_ns, max(step_end, it.end_ns), {})
            self._iteration(it)
            yield self._taken()
        if iters:  # HTA drops the last ProfilerStep; an empty closing one keeps every iteration in
            end = max(it.end_ns for it in iters)
            self.annotation(f"ProfilerStep#{iters[-1].iteration + 1}", end, end, {"ddpsim": "closing marker"})
        for n, ((start, end, k, c), lane) in enumerate(zip(comm, lanes)):
            self._collective(iters[k], c, COMM_STREAM + lane, start, end)
            if n % 256 == 255:
                yield self._taken()
        yield self._taken()

    def _taken(self) -> list[dict]:
        events, self.events = self.events, []
        return events

    def _grouped(self, it) -> tuple[dict, list]:
        """(param -> its bucket in ``it``'s layout, ``it``'s gradients in ready order), kept for the last one asked."""
        if self._group_of is not it:
            layout = self.rank.layout_at(it.iteration)
            bucket_of = {p: b.index for b in (layout.buckets if layout else []) for p in b.params}
            self._group_of, self._group = it, (bucket_of, sorted(it.grad_ready, key=lambda g: g.t_ns))
        return self._group

    def _iteration(self, it) -> None:
        n, trace = it.iteration, self.trace
        bucket_of, ready = self._grouped(it)
        base = {"iteration": n, "sync": it.sync}
        self.annotation("DistributedDataParallel.forward", it.forward.start_ns, it.forward.end_ns, base)
        self.compute("ddpsim::forward", "forward", it, it.forward.start_ns, it.forward.end_ns, base)
        prev = it.backward.start_ns
        for g in ready:
            name = trace.param_name(g.param)
            args = {**base, "param": g.param, "name": name, "bucket": bucket_of.get(g.param), "unused": g.unused}
            if g.t_ns > prev:
                self.compute(f"ddpsim::backward {name}", "backward", it, prev, g.t_ns, args)
                prev = g.t_ns
            self.instant(name, "grad_ready", g.t_ns, args)
        if not ready:  # no per-gradient times (e.g. a no_sync step recorded without hooks)
            self.compute("ddpsim::backward", "backward", it, it.backward.start_ns, it.backward.end_ns, base)
            prev = it.backward.end_ns
        if it.compute_busy is not None:  # a GPU's kernels after the last gradient (finalize's copies)
            self.compute("ddpsim::backward (after the last gradient)", "backward", it, prev,
                         it.optimizer.start_ns if it.optimizer else it.end_ns, base)
        if it.optimizer:
            self.annotation("Optimizer.step#SGD.step", it.optimizer.start_ns, it.optimizer.end_ns, base)
            self.compute("ddpsim::optimizer", "optimizer", it, it.optimizer.start_ns, it.optimizer.end_ns, base)
        if it.graph_search:
            self.annotation("torch.distributed.ddp.reducer::search_unused_parameters",
                            it.graph_search.start_ns, it.graph_search.end_ns, base)
        for b in it.buckets:
            args = {**base, "bucket": b.bucket, "bytes": b.bytes, "backend": self.backend}
            self.instant(f"bucket {b.bucket} ready", "bucket_ready", b.ready_ns, args)

    def _collective(self, it, c, tid: int, start: int, end: int) -> None:
        """The kernel of ``it``'s collective ``c`` (a bucket's or the used-parameter bitmap's) on ``tid``; a
        bucket's with an arrow from each of its gradients."""
        base, bitmap = {"iteration": it.iteration, "sync": it.sync}, c is it.bitmap_allreduce
        args = {**base, **({} if bitmap else {"bucket": c.bucket}), "bytes": c.bytes, "backend": self.backend}
        if bitmap:
            self.kernel("ncclDevKernel_AllReduce_Sum_i32_RING_LL (used-parameter bitmap)", "bitmap_allreduce",
                        tid, start, end, args)
            return
        self.kernel(f"{NCCL_NAME} (bucket {c.bucket})", "allreduce", tid, start, end, args)
        bucket_of, ready = self._grouped(it)
        for g in ready:
            if bucket_of.get(g.param) == c.bucket:
                self.arrow(min(g.t_ns, c.launch_ns), start, tid, {**base, "param": g.param, "bucket": c.bucket})

    def _metadata(self, comm_tids: set[int]) -> list[dict]:
        r = self.rank.rank
        meta = [{"ph": "M", "name": "process_name", "pid": self.gpu, "tid": 0, "args": {"name": f"rank {r}"}},
                {"ph": "M", "name": "process_labels", "pid": self.gpu, "tid": 0, "args": {"labels": f"GPU {r}"}},
                {"ph": "M", "name": "process_sort_index", "pid": self.gpu, "tid": 0, "args": {"sort_index": r}},
                {"ph": "M", "name": "process_name", "pid": self.host, "tid": 0, "args": {"name": f"rank {r} host"}},
                {"ph": "M", "name": "process_labels", "pid": self.host, "tid": 0, "args": {"labels": "CPU"}},
                {"ph": "M", "name": "thread_name", "pid": self.gpu, "tid": COMPUTE_STREAM,
                 "args": {"name": "compute (stream 7)"}}]
        for tid in sorted(comm_tids):
            label = f"communication (stream {tid})"
            meta.append({"ph": "M", "name": "thread_name", "pid": self.gpu, "tid": tid, "args": {"name": label}})
        return meta


def _header(trace: Trace, rank: int) -> dict:
    meta = trace.meta
    return {"distributedInfo": {"backend": meta.get("backend"), "rank": rank, "world_size": trace.world_size},
            "schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms",
            "otherData": {"source": trace.source, "model": meta.get("model"), "impl": meta.get("impl"),
                          "world_size": trace.world_size, "backend": meta.get("backend"),
                          "timebase": meta.get("timebase"), "exported_by": "ddpsim"}}


def steady_iterations(trace: Trace) -> set[int]:
    """The steady-state iterations (``ddpsim.analysis.steady_cycles``): no iteration 0, final layout."""
    return {i for c in steady_cycles(trace) for i in c}


def to_chrome(trace: Trace, iterations: set[int] | None = None, lazy: bool = False) -> dict:
    """Every rank in one file (the multi-rank form): device pid r, host pid HOST_PID + r. ``lazy``: its events
    and the trace it carries are ``export_write.Array``s, made as ``export_write.chunks`` writes them."""
    writers = [_RankWriter(trace, rank, rank.rank, HOST_PID + rank.rank, iterations) for rank in trace.ranks]
    out = {**_header(trace, trace.ranks[0].rank), "traceEvents": Array(b for w in writers for b in w.batches()),
           CARRIED: carried(trace)}
    return out if lazy else whole(out)


def to_kineto(trace: Trace, rank: int, iterations: set[int] | None = None, carry: bool = False,
              lazy: bool = False) -> dict:
    """One rank's file, as the PyTorch profiler writes it (device pid 0, host pid 1); ``carry``
    adds the whole trace (Note [An export carries its trace]); ``lazy`` as ``to_chrome``'s."""
    r = next((x for x in trace.ranks if x.rank == rank), None)
    if r is None:
        raise ValueError(f"the trace has no rank {rank}")
    out = {**_header(trace, rank), "traceEvents": Array(_RankWriter(trace, r, 0, 1, iterations).batches()),
           **({CARRIED: carried(trace)} if carry else {})}
    return out if lazy else whole(out)


def write_per_rank(trace: Trace, out_dir: str | Path, iterations: set[int] | None = None) -> list[Path]:
    """``OUT_DIR/rank<R>.json`` for each rank, ``to_kineto``'s, the lowest rank's carrying the trace, each written
    whole (``export_write.write_rank_files``: an OSError says which of them were written before it)."""
    lowest = min((r.rank for r in trace.ranks), default=None)
    return write_rank_files(out_dir, [r.rank for r in trace.ranks],  # json.dumps' ": " separators (HTA)
                            lambda r: chunks(to_kineto(trace, r, iterations, carry=r == lowest, lazy=True)))


def add_arguments(p) -> None:
    p.add_argument("--chrome", action="store_true", required=True,
                   help="write the PyTorch profiler's Chrome-trace (Kineto) shape")
    p.add_argument("trace", help="ddpsim trace (JSON)")
    p.add_argument("out", help="file to write (a name ending in .gz: gzipped); with --per-rank, a folder for "
                              "rank<R>.json files")
    p.add_argument("--per-rank", action="store_true",
                   help="one Kineto file per rank in the folder OUT (what HolisticTraceAnalysis reads)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--steady", action="store_true",
                       help="only the steady-state iterations (no iteration 0, no layout rebuild); --per-rank's "
                            "default, so that HTA's figures are ddpsim's")
    which.add_argument("--all-iterations", action="store_true", help="every iteration (the default without "
                                                                     "--per-rank)")


def main(args) -> int:
    refuse_empty(args.out, "OUT", "a folder name" if args.per_rank else "a file name")
    if args.per_rank and args.out.endswith((".json", ".gz")) and not Path(args.out).is_dir():
        raise ValueError(f"--per-rank writes a folder of rank<R>.json files: OUT {args.out} names a file")
    trace = load_trace(args.trace)
    steady = args.steady or (args.per_rank and not args.all_iterations)
    keep = (steady_iterations(trace) or None) if steady else None
    if args.per_rank:
        paths = write_per_rank(trace, args.out, keep)
        which = f"steady iterations {min(keep)}-{max(keep)}" if keep else "every iteration"
        print(f"wrote {len(paths)} per-rank Kineto trace{'s' * (len(paths) != 1)} to {args.out}/ (rank<R>.json; "
              f"{which}, so HTA's comm/compute overlap is ddpsim's, with HTA_DISABLE_NS_ROUNDING=1: by default HTA "
              "rounds each event inward to whole microseconds): open one in https://ui.perfetto.dev or the folder "
              "with HolisticTraceAnalysis")
        return 0
    chrome = to_chrome(trace, keep, lazy=True)
    write_chunks(chunks(chrome), args.out)  # whole or not at all; .gz: gzipped
    print(f"wrote {args.out}: {chrome['traceEvents'].count} events; open it in https://ui.perfetto.dev")
    return 0
