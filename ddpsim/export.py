"""Chrome Trace Event export: open a ddpsim trace in Perfetto or chrome://tracing.

Layout: one ``pid`` per rank, ``tid`` 0 for compute and ``tid`` 1 (and up, when
collectives overlap) for communication, because Perfetto needs the complete
("X") events on one track to nest. Timestamps are microseconds on the trace's
one clock. Categories (``cat``): forward, backward, optimizer, allreduce,
graph_search, bitmap_allreduce; instants: grad_ready, bucket_ready.
"""
from __future__ import annotations

import json
from pathlib import Path

from ddpsim.trace import Trace, load_trace

HELP = "export a trace to Chrome Trace Event JSON (Perfetto, chrome://tracing)"
COMPUTE, COMM = 0, 1  # tids


def _us(ns: int) -> float:
    return ns / 1000.0


def _span(name, cat, pid, tid, start_ns, end_ns, args):
    return {"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
            "ts": _us(start_ns), "dur": _us(end_ns - start_ns), "args": args}


def _instant(name, cat, pid, tid, t_ns, args):
    return {"name": name, "cat": cat, "ph": "i", "s": "t", "pid": pid, "tid": tid,
            "ts": _us(t_ns), "args": args}


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


def _rank_events(trace: Trace, rank) -> list[dict]:
    pid, events, comm = rank.rank, [], []
    for it in rank.iterations:
        n = it.iteration
        layout = rank.layout_at(n)
        bucket_of = {p: b.index for b in (layout.buckets if layout else []) for p in b.params}
        for cat, span in (("forward", it.forward), ("backward", it.backward), ("optimizer", it.optimizer),
                          ("graph_search", it.graph_search)):
            if span:
                args = {"iteration": n, "sync": it.sync}
                events.append(_span(f"{cat} {n}", cat, pid, COMPUTE, span.start_ns, span.end_ns, args))
        for g in it.grad_ready:
            events.append(_instant(trace.param_name(g.param), "grad_ready", pid, COMPUTE, g.t_ns, {
                "iteration": n, "param": g.param, "name": trace.param_name(g.param),
                "bucket": bucket_of.get(g.param), "unused": g.unused}))
        for b in it.buckets:
            events.append(_instant(f"bucket {b.bucket} ready", "bucket_ready", pid, COMPUTE, b.ready_ns,
                                   {"iteration": n, "bucket": b.bucket, "bytes": b.bytes}))
            comm.append(("allreduce", f"allreduce bucket {b.bucket}", b.launch_ns, b.complete_ns,
                         {"iteration": n, "bucket": b.bucket, "bytes": b.bytes}))
        if it.bitmap_allreduce:
            c = it.bitmap_allreduce
            comm.append(("bitmap_allreduce", "used-parameter bitmap", c.launch_ns, c.complete_ns,
                         {"iteration": n, "bytes": c.bytes}))
    comm.sort(key=lambda c: c[2])
    for (cat, name, start, end, args), lane in zip(comm, _lanes([(c[2], c[3]) for c in comm])):
        events.append(_span(name, cat, pid, COMM + lane, start, end, args))
    return events


def _metadata(rank: int, comm_tids: set[int]) -> list[dict]:
    meta = [{"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank}"}},
            {"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}},
            {"ph": "M", "name": "thread_name", "pid": rank, "tid": COMPUTE, "args": {"name": "compute"}}]
    for tid in sorted(comm_tids):
        label = "communication" if tid == COMM else f"communication {tid - COMM + 1}"
        meta.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": label}})
    return meta


def to_chrome(trace: Trace) -> dict:
    events = []
    for rank in trace.ranks:
        rank_events = _rank_events(trace, rank)
        tids = {e["tid"] for e in rank_events if e["tid"] >= COMM} | {COMM}
        events += _metadata(rank.rank, tids) + rank_events
    meta = trace.meta
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"source": trace.source, "model": meta.get("model"), "impl": meta.get("impl"),
                          "world_size": trace.world_size, "backend": meta.get("backend")},
            "distributedInfo": {"backend": meta.get("backend"), "rank": 0, "world_size": trace.world_size}}


def add_arguments(p) -> None:
    p.add_argument("--chrome", action="store_true", required=True,
                   help="write Chrome Trace Event JSON (the only export format so far)")
    p.add_argument("trace", help="ddpsim trace (JSON)")
    p.add_argument("out", help="Chrome trace file to write")


def main(args) -> int:
    chrome = to_chrome(load_trace(args.trace))
    Path(args.out).write_text(json.dumps(chrome))
    print(f"wrote {args.out}: {len(chrome['traceEvents'])} events; open it in https://ui.perfetto.dev")
    return 0
