"""Reading a trace strictly: every value checked, so what load_trace returns can be trusted.

``ddpsim.trace`` re-exports ``load_trace``, ``parse_trace`` and ``from_dict``;
the format itself (the dataclasses) is there, and in ``docs/trace-format.md``.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ddpsim.buckets import SCALAR_TYPES
from ddpsim.trace.jsontext import GZIP_MAGIC, MAX_DEPTH, PROFILE_HINT, gunzip_limited, json_depth, loads_limited
from ddpsim.trace.checks import MAX_WORLD_SIZE, check_consistency, check_logging_data, check_meta, is_int64
from ddpsim.trace.hookfields import hook_fields
from ddpsim.trace.types import (CARRIED, FORMAT, SOURCES, VERSION, Bucket, BucketEvent, Collective, GradReady, Iteration,
                                JoinRecord, Layout, Param, RankTrace, ShadowStep, Span, Trace, TraceFormatError)

# Limits on what a trace may hold (Note [A strict reader]); a real trace is far inside every one.
MAX_TRACE_BYTES = 512 * 2**20  # bytes; larger files are refused before they are read
MAX_INT = 2**63 - 1  # every integer field fits int64, as in the recorder's clocks
MAX_PARAMS = 10_000_000  # parameter indices are below this
MAX_BYTES = 2**50  # bytes (1 PiB): a parameter, a bucket, a collective, all parameters together
# (GPT-3's fp32 gradients are 0.7 TiB), so that any sum of sizes a simulation or an export forms
# stays far inside int64 and what ddpsim writes from a trace it read, it can read back

# Note [A strict reader]: a trace may come from anywhere (an upload on the dashboard,
# a file mailed by a student), and every analysis, figure and the simulator trust
# what load_trace returns. So the reader checks values, not only types: versions are
# integers (not true), booleans are true/false (not "false"), sizes, indices and
# times are >= 0, spans end at or after their start, ranks are distinct and below
# the world size, iterations go forward, and every parameter a bucket or gradient
# names exists. Before parsing, the file size, the JSON nesting depth and the
# length of integers are bounded, so a 10 KB file of brackets or a 5,000-digit
# number is one TraceFormatError, not a RecursionError. A partial trace (a run
# stopped before its first iteration, a rank that recorded nothing) is valid.


def load_trace(path: str | Path, max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """Load a trace file (gzipped or not), raising TraceFormatError with the problem named."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise TraceFormatError(f"{path} is {size / 2**20:.0f} MiB; the limit is {max_bytes / 2**20:.0f} MiB")
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(f"cannot read trace {path}: {e.strerror}") from None
    return parse_trace(data, name=str(path), max_bytes=max_bytes)


def parse_trace(text: str | bytes, name: str = "trace", max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """Parse trace JSON text (e.g. an upload; gzipped bytes are decompressed, at most ``max_bytes``)
    into a Trace."""
    if isinstance(text, bytes) and text[:2] == GZIP_MAGIC:
        text = gunzip_limited(text, max_bytes, name)
    if len(text) > max_bytes:
        raise TraceFormatError(f"{name} is {len(text) / 2**20:.0f} MiB; the limit is {max_bytes / 2**20:.0f} MiB")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceFormatError(f"{name} is not UTF-8 text, so not a ddpsim trace") from None
    if not text.strip():
        raise TraceFormatError(f"{name} is empty")
    raw = loads_limited(text, name)
    return from_dict(raw, name=name, depth_checked=True)


def from_dict(raw: Any, name: str = "trace", depth_checked: bool = False) -> Trace:
    """A Trace from parsed JSON, checked value by value (Note [A strict reader]). A Chrome-trace
    export that carries its trace (``export --chrome``) reads as that trace."""
    if isinstance(raw, dict) and "traceEvents" in raw and isinstance(raw.get(CARRIED), dict):
        raw = raw[CARRIED]  # Note [An export carries its trace] in ddpsim.trace.export
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        chrome = (isinstance(raw, dict) and "traceEvents" in raw) or (
            isinstance(raw, list) and bool(raw) and all(isinstance(e, dict) and "ph" in e for e in raw[:5]))
        hint = f"; {PROFILE_HINT}" if chrome else ""
        raise TraceFormatError(f"{name} is not a ddpsim trace (no \"format\": \"{FORMAT}\"){hint}")
    version = raw.get("version")
    if type(version) is not int or version != VERSION:
        raise TraceFormatError(
            f"{name} has trace version {version!r:.40}; this ddpsim reads version {VERSION}"
        )
    if not depth_checked and json_depth(raw) > MAX_DEPTH:  # a dict built in memory, not parsed text
        raise TraceFormatError(f"{name} nests more than {MAX_DEPTH} levels deep")
    r = _Reader(name)
    source = r.get(raw, "source", str, "")
    if source not in SOURCES:
        raise TraceFormatError(f"{name}: source must be one of {SOURCES}, not {source!r:.40}")
    meta = r.get(raw, "meta", dict, "")
    check_meta(r, meta)
    params = [r.param(p, f"params[{i}]") for i, p in enumerate(r.get(raw, "params", list, ""))]
    ranks = [r.rank(x, f"ranks[{i}]") for i, x in enumerate(r.get(raw, "ranks", list, ""))]
    if not ranks:
        raise TraceFormatError(f"{name} has no ranks")
    trace = Trace(source=source, meta=meta, params=params, ranks=ranks)
    check_consistency(r, trace)
    return trace


class _Reader:
    """Builds the dataclasses from JSON, naming the path of any bad field."""

    max_bytes = MAX_BYTES  # for checks.check_consistency (which cannot import this module)

    def __init__(self, name: str):
        self.name = name

    def fail(self, where: str, problem: str):
        raise TraceFormatError(f"{self.name}: field {where}: {problem}")

    def get(self, d: Any, key: str, typ: type | tuple, path: str, optional: bool = False):
        return self.value(d, key, typ, path, optional)

    def value(self, d: Any, key: str, typ, path: str, optional: bool = False, lo=None, hi=None):
        """d[key], checked: its type (bool is never an int), finite, within [lo, hi]."""
        where = f"{path}.{key}" if path else key
        if not isinstance(d, dict):
            raise TraceFormatError(f"{self.name}: {path or 'top level'} should be an object")
        if key not in d or d[key] is None:
            if optional:
                return None
            raise TraceFormatError(f"{self.name}: missing field {where}")
        v = d[key]
        if typ is float:
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        elif typ is int:
            ok = is_int64(v)
        else:
            ok = isinstance(v, typ) and (typ is bool or not isinstance(v, bool))
        if not ok:
            raise TraceFormatError(
                f"{self.name}: field {where} should be {_typename(typ)}, not {v!r:.40}")
        if lo is not None and v < lo:
            raise TraceFormatError(f"{self.name}: field {where} should be >= {lo}, not {v!r:.40}")
        if hi is not None and v > hi:
            raise TraceFormatError(f"{self.name}: field {where} should be <= {hi}, not {v!r:.40}")
        return v

    def count(self, d, key, path, optional=False, hi=MAX_INT):
        """A size, index or time: an integer >= 0."""
        if type(d) is dict:  # the common case, checked fast
            v = d.get(key)
            if type(v) is int and 0 <= v <= hi:
                return v
        return self.value(d, key, int, path, optional, lo=0, hi=hi)

    def flag(self, d, key, path, default: bool) -> bool:
        v = self.value(d, key, bool, path, optional=True)
        return default if v is None else v

    def span(self, d, key, path, optional=False):
        s = self.get(d, key, dict, path, optional)
        if s is None:
            return None
        return self.span_at(s, f"{path}.{key}")

    def span_at(self, s, p):
        start, end = self.count(s, "start_ns", p), self.count(s, "end_ns", p)
        if end < start:
            self.fail(p, f"ends ({end}) before it starts ({start})")
        return Span(start, end)

    def ints(self, d, key, path, hi=MAX_INT) -> list[int]:
        values = self.get(d, key, list, path)
        if not all(type(x) is int and 0 <= x <= hi for x in values):
            for i in range(len(values)):
                self.count({"_": values[i]}, "_", f"{path}.{key}[{i}]", hi=hi)
        return list(values)

    def param(self, d, path):
        dtype = self.get(d, "dtype", str, path)
        if dtype not in SCALAR_TYPES:  # bucket assignment keys buckets by dtype (ddpsim/buckets.py)
            self.fail(f"{path}.dtype", f"should be a torch dtype name such as 'float32', not {dtype!r:.40}")
        return Param(self.count(d, "index", path, True, hi=MAX_PARAMS), self.get(d, "name", str, path),
                     self.ints(d, "shape", path), dtype, self.count(d, "bytes", path, hi=MAX_BYTES),
                     self.flag(d, "requires_grad", path, True))

    def layout(self, d, path):
        buckets = []
        for i, b in enumerate(self.get(d, "buckets", list, path)):
            p = f"{path}.buckets[{i}]"
            cap = self.count(b, "cap_bytes", p, True)  # a limit, not a size: torch uses 2^63-1 for none
            buckets.append(Bucket(self.count(b, "index", p), self.ints(b, "params", p, hi=MAX_PARAMS),
                                  self.count(b, "bytes", p, hi=MAX_BYTES), cap))
        return Layout(self.count(d, "from_iteration", path), self.get(d, "kind", str, path), buckets)

    def bucket_event(self, b, p) -> BucketEvent:
        bucket, ready, launch, complete = (self.count(b, k, p) for k in
                                           ("bucket", "ready_ns", "launch_ns", "complete_ns"))
        nbytes = self.count(b, "bytes", p, hi=MAX_BYTES)
        launch_end = self.count(b, "launch_end_ns", p, True)
        if complete < launch:
            self.fail(f"{p}.complete_ns", f"the allreduce completes ({complete}) before it launches ({launch})")
        if launch_end is not None and launch_end < launch:
            self.fail(f"{p}.launch_end_ns", f"the launch returns ({launch_end}) before it starts ({launch})")
        cpu_launch, cpu_complete = (self.value(b, k, int, p, True) for k in ("cpu_launch_ns", "cpu_complete_ns"))
        return BucketEvent(bucket, nbytes, ready, launch, complete, launch_end, cpu_launch, cpu_complete,
                           *hook_fields(self, b, p, launch, complete))

    def iteration(self, d, path):
        grads = []
        for i, x in enumerate(self.get(d, "grad_ready", list, path)):
            p = f"{path}.grad_ready[{i}]"
            grads.append(GradReady(self.count(x, "t_ns", p), self.count(x, "param", p, hi=MAX_PARAMS),
                                   self.flag(x, "unused", p, False), self.value(x, "cpu_t_ns", int, p, True)))
        buckets = [self.bucket_event(b, f"{path}.buckets[{i}]")
                   for i, b in enumerate(self.get(d, "buckets", list, path))]
        forward, backward = self.span(d, "forward", path), self.span(d, "backward", path)
        return Iteration(self.count(d, "iteration", path), self.value(d, "sync", bool, path), forward, backward,
                         self.span(d, "optimizer", path, True), grads, buckets,
                         self.span(d, "graph_search", path, True), self.collective(d, "bitmap_allreduce", path),
                         self.collective(d, "buffer_broadcast", path), self.count(d, "backward_cpu_ns", path, True),
                         self.spans(d, "compute_busy", path))

    def spans(self, d, key, path) -> list[Span] | None:
        """An optional list of spans in time order (``compute_busy``), or None."""
        if (items := self.get(d, key, list, path, True)) is None:
            return None
        out = [self.span_at(s, f"{path}.{key}[{i}]") for i, s in enumerate(items)]
        if any(b.start_ns < a.end_ns for a, b in zip(out, out[1:])):
            self.fail(f"{path}.{key}", "spans overlap or are out of time order")
        return out

    def collective(self, d, key, path):
        """An optional collective that is not a bucket (``Collective``), or None."""
        if (c := self.get(d, key, dict, path, True)) is None:
            return None
        return self.collective_at(c, f"{path}.{key}")

    def collective_at(self, c, p):
        c = Collective(*(self.count(c, k, p) for k in ("launch_ns", "complete_ns")), self.count(c, "bytes", p, hi=MAX_BYTES))
        return c if c.complete_ns >= c.launch_ns else self.fail(p, "completes before it launches")

    def rank(self, d, path):
        g = lambda k, t, o=False: self.get(d, k, t, path, o)  # noqa: E731
        return RankTrace(
            rank=self.count(d, "rank", path, hi=MAX_WORLD_SIZE), host=g("host", str, True) or "",
            pid=self.count(d, "pid", path, True), clock_offset_ns=g("clock_offset_ns", int, True) or 0,
            complete=self.flag(d, "complete", path, True), error=g("error", str, True),
            layouts=[self.layout(x, f"{path}.layouts[{i}]") for i, x in enumerate(g("layouts", list))],
            iterations=[self.iteration(x, f"{path}.iterations[{i}]")
                        for i, x in enumerate(g("iterations", list))],
            ddp_logging_data=check_logging_data(self, g("ddp_logging_data", dict, True), f"{path}.ddp_logging_data"),
            join=self.join(d, path),
        )

    def join(self, d, path):
        """A rank's ``JoinRecord`` (``record --join``), or None."""
        if (j := self.get(d, "join", dict, path, True)) is None:
            return None
        p, shadows = f"{path}.join", []
        for i, x in enumerate(self.get(j, "shadows", list, f"{path}.join")):
            q = f"{p}.shadows[{i}]"
            span = self.span_at(x, q)
            shadows.append(ShadowStep(self.count(x, "iteration", q), span.start_ns, span.end_ns, [
                self.collective_at(c, f"{q}.allreduces[{k}]") for k, c in enumerate(self.get(x, "allreduces", list, q))]))
        span = self.span_at(j, p)
        return JoinRecord(span.start_ns, span.end_ns, self.flag(j, "divide_by_initial_world_size", p, True), shadows)


def _typename(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return {"int": "an integer", "str": "a string", "list": "a list", "dict": "an object",
            "bool": "true or false", "float": "a finite number"}.get(typ.__name__, typ.__name__)
