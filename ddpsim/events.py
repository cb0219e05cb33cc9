"""Per-rank event sink: what every DDP implementation reports while it runs.

Torch's DDP (through hooks, see ``instrument.py``), ddpsim's readable DDP and the
naive variant all report to a ``RankRecorder``. It keeps one iteration in memory
and appends it to the rank's shard file as one JSON line when the iteration ends,
so a rank that crashes still leaves every finished iteration on disk.

Shard file (JSON Lines), one object per line, each with a ``kind``:
  {"kind": "header", "rank", "host", "pid", "params": [...], ...}
  {"kind": "header_update", ...}                        (facts learnt later)
  {"kind": "layout", "from_iteration", "layout_kind", "buckets": [...]}
  {"kind": "iteration", ...the Iteration fields of docs/trace-format.md...}
  {"kind": "end", "ddp_logging_data": {...}}           (only on a clean finish)
  {"kind": "error", "error": "..."}                    (when the rank failed)
``ddpsim.record.merge`` turns the shards into one trace.
"""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from ddpsim import heartbeat


HOST_ENV = "DDPSIM_HOST"  # the name this node goes by in a trace (default: its hostname)


def now_ns() -> int:
    """The recorder clock. perf_counter_ns is shared by all processes on one host."""
    return time.perf_counter_ns()


def host_name() -> str:
    """This node's name in a trace: ``$DDPSIM_HOST``, else the hostname.

    Note [Which ranks share a clock]: ranks on one host share ``now_ns()``; ranks on different
    hosts are aligned by the barrier estimate (record/clock.py). Hosts are told apart by name,
    so nodes that report the same hostname (containers started from one image) need a
    ``DDPSIM_HOST`` each; two torchrun agents on one machine given two names are how the
    alignment across hosts is tested where its answer is known (every offset is 0).
    """
    return os.environ.get(HOST_ENV) or socket.gethostname()


class RankRecorder:
    """Collects one rank's events; times are raw ``now_ns()`` values."""

    def __init__(self, shard_path: str | Path, rank: int, header: dict):
        self.rank = rank
        self.path = Path(shard_path)
        self._file = open(self.path, "w", buffering=1)  # line-buffered: a crash loses <= 1 line
        self._write({"kind": "header", "rank": rank, "host": host_name(),
                     "pid": os.getpid(), **header})
        self.iteration = None  # dict of the iteration being recorded
        self.layout = None  # list of bucket dicts currently in effect
        self._observed = {}  # bucket index -> bucket dict seen this iteration

    def header_update(self, fields: dict) -> None:
        """Add run facts learnt after start-up (the parameter table, the clock offset)."""
        self._write({"kind": "header_update", **fields})

    # -- layouts -------------------------------------------------------------------------
    def set_layout(self, from_iteration: int, kind: str, buckets: list[dict]) -> None:
        """Declare the bucket layout in effect from ``from_iteration`` on.

        ``buckets``: [{"index", "params", "bytes", "cap_bytes"}], in bucket order.
        """
        self.layout = [dict(b) for b in buckets]
        self._write({"kind": "layout", "from_iteration": from_iteration,
                     "layout_kind": kind, "buckets": self.layout})

    # -- one iteration -------------------------------------------------------------------
    def begin_iteration(self, iteration: int, sync: bool) -> None:
        self.iteration = {"iteration": iteration, "sync": sync, "grad_ready": [],
                          "buckets": [], "graph_search": None, "bitmap_allreduce": None,
                          "optimizer": None}
        self._observed = {}

    def span(self, name: str, start_ns: int, end_ns: int) -> None:
        """``name``: forward, backward, optimizer or graph_search."""
        self.iteration[name] = {"start_ns": start_ns, "end_ns": end_ns}

    def grad_ready(self, param: int, t_ns: int, unused: bool = False) -> dict:
        """Returns the event, so that a GPU time can replace ``t_ns`` later (gpuclock.py)."""
        ev = {"t_ns": t_ns, "param": param, **({"unused": True} if unused else {})}
        self.iteration["grad_ready"].append(ev)
        return ev

    def bucket_launch(self, bucket: int, params: list[int], nbytes: int, t_ns: int,
                      ready_ns: int | None = None) -> dict:
        """A bucket's allreduce was launched. Returns the event to complete later.

        ``ready_ns`` may be None: it is then taken at ``end_iteration`` as the time
        the bucket's last gradient became ready.
        """
        heartbeat.beat(bucket=bucket)
        ev = {"bucket": bucket, "bytes": nbytes, "ready_ns": ready_ns,
              "launch_ns": t_ns, "complete_ns": None}
        self.iteration["buckets"].append(ev)
        self._observed[bucket] = {"index": bucket, "params": list(params), "bytes": nbytes}
        return ev

    def bucket_skipped(self, bucket: int, params: list[int], nbytes: int) -> None:
        """A bucket left without an allreduce this iteration (skip_all_reduce_unused_params): part of
        the layout in force, with no event (Note [Skipping the allreduce of unused buckets])."""
        self._observed[bucket] = {"index": bucket, "params": list(params), "bytes": nbytes}

    @staticmethod
    def bucket_complete(event: dict, t_ns: int) -> None:
        event["complete_ns"] = t_ns

    @staticmethod
    def launch_end(event: dict, t_ns: int) -> None:
        """The launch call returned (what it cost the autograd thread ends here)."""
        event["launch_end_ns"] = t_ns

    def bitmap_allreduce(self, launch_ns: int, complete_ns: int, nbytes: int) -> None:
        self.iteration["bitmap_allreduce"] = {"launch_ns": launch_ns,
                                              "complete_ns": complete_ns, "bytes": nbytes}

    def buffer_broadcast(self, launch_ns: int, complete_ns: int, nbytes: int) -> dict:
        """DDP's ``_sync_buffers`` at this iteration's forward: rank 0's buffers to every rank.
        Returns the event, so that GPU times can replace the host ones later (gpuclock.py)."""
        ev = {"launch_ns": launch_ns, "complete_ns": complete_ns, "bytes": nbytes}
        self.iteration["buffer_broadcast"] = ev
        return ev

    def end_iteration(self, layout_caps=None, rebuilt: bool = False) -> None:
        """Write the finished iteration to the shard.

        If the buckets launched this iteration differ from the layout in effect, the
        observed layout becomes a new layout from this iteration on. ``layout_caps``
        (a function: observed buckets -> caps, or None) supplies each new bucket's cap.
        ``rebuilt``: the DDP rebuilt its buckets before this iteration.

        Note [A rebuild is recorded even when nothing moved]: torch rebuilds once after
        the first synced iteration whatever the result (``Reducer::rebuild_buckets``), so
        a rebuild that gives back the same buckets is still a "rebuilt" layout, for
        torch's DDP (told by ``rebuilt``) as for minddp (which records its own rebuild).
        """
        it = self.iteration
        if self._observed:
            observed = [self._observed[k] for k in sorted(self._observed)]
            if self.layout is None or rebuilt or _shape(observed) != _shape(self.layout):
                caps = layout_caps(observed) if layout_caps else [None] * len(observed)
                kind = "construction" if self.layout is None else "rebuilt"
                self.set_layout(it["iteration"], kind,
                                [{**b, "cap_bytes": c} for b, c in zip(observed, caps)])
        ready = {g["param"]: g["t_ns"] for g in it["grad_ready"]}
        members = {b["index"]: b["params"] for b in (self.layout or [])}
        for ev in it["buckets"]:
            if ev["ready_ns"] is None:
                times = [ready[p] for p in members.get(ev["bucket"], []) if p in ready]
                ev["ready_ns"] = max(times) if times else ev["launch_ns"]
            if ev["complete_ns"] is None:  # cannot happen after a clean backward
                ev["complete_ns"] = ev["launch_ns"]
            if "collectives" in ev:
                _hook_compute(ev)
        self._write({"kind": "iteration", **it})
        self.iteration = None

    # -- Join: a rank whose data ran out (Note [Join] in minddp/join.py) ---------------------
    def begin_shadow(self, iteration: int, start_ns: int) -> None:
        """This joined rank shadows the others' ``iteration`` (``_DDPJoinHook.main_hook``); the
        zero-filled bucket allreduces it issues are recorded by ``bucket_launch`` as usual."""
        self.iteration = {"iteration": iteration, "start_ns": start_ns, "buckets": []}
        self._observed = {}

    def end_shadow(self, end_ns: int) -> None:
        it, self.iteration = self.iteration, None
        allreduces = [{"launch_ns": b["launch_ns"], "complete_ns": b["complete_ns"] or b["launch_ns"],
                       "bytes": b["bytes"]} for b in it["buckets"]]
        self._write({"kind": "shadow", "iteration": it["iteration"], "start_ns": it["start_ns"],
                     "end_ns": end_ns, "allreduces": allreduces})

    def join(self, start_ns: int, end_ns: int, divide_by_initial_world_size: bool) -> None:
        """The rank left its training loop at ``start_ns`` (Join's ``__exit__``) and every rank
        had joined, and the final model sync (``_sync_final_model``) ended, at ``end_ns``."""
        self._write({"kind": "join", "start_ns": start_ns, "end_ns": end_ns,
                     "divide_by_initial_world_size": divide_by_initial_world_size})

    # -- the end -------------------------------------------------------------------------
    def finish(self, ddp_logging_data: dict | None) -> None:
        self._write({"kind": "end", "ddp_logging_data": ddp_logging_data})
        self._file.close()

    def fail(self, error: str) -> None:
        if not self._file.closed:
            self._write({"kind": "error", "error": error})
            self._file.close()

    def _write(self, obj: dict) -> None:
        self._file.write(json.dumps(obj, separators=(",", ":"), default=_jsonable) + "\n")


def _hook_compute(ev: dict) -> None:
    """A comm hook's bucket (record/hookwatch.py): its compute before the first collective and after
    the last (``compress_ns``, ``decompress_ns``; docs/trace-format.md).

    Note [A collective's completion may be seen late]: a hook that waits on a collective's future
    (PowerSGD's callbacks) can go on before the callback that notes the completion has run on the
    gloo thread (c10's Future wakes its waiters first, then runs its callbacks), so a completion
    seen after the hook's own, or not yet, is taken as the hook's completion. (Copies: such a late
    callback still writes into its own row.)
    """
    end = ev["complete_ns"]
    cols = ev["collectives"] = [{**c, "complete_ns": end if c["complete_ns"] is None else min(end, c["complete_ns"])}
                                for c in ev["collectives"]]
    first = min((c["launch_ns"] for c in cols), default=end)
    last = max((c["complete_ns"] for c in cols), default=end)
    ev["compress_ns"], ev["decompress_ns"] = first - ev["launch_ns"], end - last


def _shape(buckets: list[dict]) -> list:
    return [(b["index"], list(b["params"])) for b in buckets]


def _jsonable(x):
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)
