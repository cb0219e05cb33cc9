"""The ddpsim trace: one format for real and simulated DDP runs.

Every part of ddpsim speaks this format: the recorder writes it, the readable DDP
writes it, the simulator writes it, and the analyses, figures, app and notebooks
read it. The field-by-field reference, with units, is ``docs/trace-format.md``.

Times are integer nanoseconds on one aligned clock for all ranks, counted from
the start of the run (``t_ns = 0``). Sizes are bytes.

    >>> trace = load_trace("run.json")          # doctest: +SKIP
    >>> trace.ranks[0].iterations[1].buckets     # doctest: +SKIP
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

FORMAT = "ddpsim-trace"
VERSION = 1
SOURCES = ("real", "simulated")


class TraceFormatError(ValueError):
    """A trace file that cannot be read: truncated, garbled, or the wrong version."""


@dataclass
class Param:
    """One model parameter, as DDP's reducer sees it."""

    index: int | None  # DDP's parameter index (None: frozen, so not in the reducer)
    name: str
    shape: list[int]
    dtype: str
    bytes: int
    requires_grad: bool = True


@dataclass
class Bucket:
    """One gradient bucket in a layout."""

    index: int  # bucket index; allreduces launch in this order
    params: list[int]  # DDP parameter indices, in the bucket's internal order
    bytes: int
    cap_bytes: int | None = None  # the size limit the bucket was built under


@dataclass
class Layout:
    """A bucket layout and the first iteration it was in effect."""

    from_iteration: int
    kind: str  # "construction" or "rebuilt"
    buckets: list[Bucket]


@dataclass
class Span:
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class GradReady:
    """A parameter's gradient became ready (its AccumulateGrad hook fired)."""

    t_ns: int
    param: int
    unused: bool = False  # marked ready by find_unused_parameters, not computed
    cpu_t_ns: int | None = None  # when t_ns is the GPU's (meta.timebase): the host time the hook ran


@dataclass
class BucketEvent:
    """One bucket's reduction in one iteration: ready, launched, complete."""

    bucket: int
    bytes: int
    ready_ns: int
    launch_ns: int
    complete_ns: int
    launch_end_ns: int | None = None  # the launch call returned: its cost on the autograd thread ends
    cpu_launch_ns: int | None = None  # when times are the GPU's (meta.timebase): the host launch time
    cpu_complete_ns: int | None = None  # ... and the host time the completion callback ran


@dataclass
class Collective:
    """A collective that is not a gradient bucket (the used-parameter bitmap)."""

    launch_ns: int
    complete_ns: int
    bytes: int


@dataclass
class Iteration:
    """One forward/backward (a micro-step when no_sync accumulates)."""

    iteration: int
    sync: bool  # False: a no_sync accumulation step, no allreduce
    forward: Span
    backward: Span
    optimizer: Span | None = None
    grad_ready: list[GradReady] = field(default_factory=list)
    buckets: list[BucketEvent] = field(default_factory=list)
    graph_search: Span | None = None  # find_unused_parameters' walk of the graph
    bitmap_allreduce: Collective | None = None

    @property
    def end_ns(self) -> int:
        return self.optimizer.end_ns if self.optimizer else self.backward.end_ns

    @property
    def backward_compute_end_ns(self) -> int:
        """When the last gradient became ready: the end of backward's compute."""
        return max((g.t_ns for g in self.grad_ready), default=self.backward.end_ns)


@dataclass
class RankTrace:
    rank: int
    host: str = ""
    pid: int | None = None
    clock_offset_ns: int = 0  # this rank's clock minus rank 0's, already removed
    complete: bool = True
    error: str | None = None
    layouts: list[Layout] = field(default_factory=list)
    iterations: list[Iteration] = field(default_factory=list)
    ddp_logging_data: dict | None = None  # torch's _get_ddp_logging_data(), verbatim

    def layout_at(self, iteration: int) -> Layout | None:
        """The bucket layout in effect at ``iteration``."""
        current = None
        for layout in self.layouts:
            if layout.from_iteration <= iteration:
                current = layout
        return current

    def iteration(self, iteration: int) -> Iteration | None:
        """This rank's iteration number ``iteration`` (None if it did not record it)."""
        return next((it for it in self.iterations if it.iteration == iteration), None)


@dataclass
class Trace:
    source: str  # "real" or "simulated"
    meta: dict
    params: list[Param]
    ranks: list[RankTrace]
    version: int = VERSION

    @property
    def complete(self) -> bool:
        return all(r.complete for r in self.ranks)

    @property
    def world_size(self) -> int:
        return int(self.meta.get("world_size", len(self.ranks)))

    def param_name(self, index: int) -> str:
        for p in self.params:
            if p.index == index:
                return p.name
        return f"param{index}"

    def iteration_on_ranks(self, iteration: int) -> list[Iteration]:
        """Iteration number ``iteration`` of every rank that recorded it, in rank order."""
        return [it for it in (r.iteration(iteration) for r in self.ranks) if it is not None]

    def to_dict(self) -> dict:
        d = asdict(self)
        d = {"format": FORMAT, **d}
        return d

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), separators=(",", ":")))


# --------------------------------------------------------------------------- loading


def load_trace(path: str | Path) -> Trace:
    """Load a trace file, raising TraceFormatError with the problem named."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise TraceFormatError(f"cannot read trace {path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise TraceFormatError(f"{path} is not a text file, so not a ddpsim trace") from None
    return parse_trace(text, name=str(path))


def parse_trace(text: str | bytes, name: str = "trace") -> Trace:
    """Parse trace JSON text (e.g. an upload) into a Trace."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise TraceFormatError(f"{name} is not UTF-8 text, so not a ddpsim trace") from None
    if not text.strip():
        raise TraceFormatError(f"{name} is empty")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as e:
        if _unclosed(text):
            raise TraceFormatError(f"{name} is truncated: the JSON ends early ({e.msg})") from None
        raise TraceFormatError(
            f"{name} is not valid JSON: {e.msg.removesuffix(' at')} at line {e.lineno}, column {e.colno}"
        ) from None
    return from_dict(raw, name=name)


def _unclosed(text: str) -> bool:
    """True if the JSON text stops inside a string or with brackets still open (truncated)."""
    depth, in_string, escaped = 0, False, False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
    return in_string or depth > 0


def from_dict(raw: Any, name: str = "trace") -> Trace:
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise TraceFormatError(f"{name} is not a ddpsim trace (no \"format\": \"{FORMAT}\")")
    version = raw.get("version")
    if version != VERSION:
        raise TraceFormatError(
            f"{name} has trace version {version!r}; this ddpsim reads version {VERSION}"
        )
    r = _Reader(name)
    source = r.get(raw, "source", str, "")
    if source not in SOURCES:
        raise TraceFormatError(f"{name}: source must be one of {SOURCES}, not {source!r}")
    params = [r.param(p, f"params[{i}]") for i, p in enumerate(r.get(raw, "params", list, ""))]
    ranks = [r.rank(x, f"ranks[{i}]") for i, x in enumerate(r.get(raw, "ranks", list, ""))]
    if not ranks:
        raise TraceFormatError(f"{name} has no ranks")
    return Trace(source=source, meta=r.get(raw, "meta", dict, ""), params=params, ranks=ranks)


class _Reader:
    """Builds the dataclasses from JSON, naming the path of any bad field."""

    def __init__(self, name: str):
        self.name = name

    def get(self, d: Any, key: str, typ: type | tuple, path: str, optional: bool = False):
        where = f"{path}.{key}" if path else key
        if not isinstance(d, dict):
            raise TraceFormatError(f"{self.name}: {path or 'top level'} should be an object")
        if key not in d or d[key] is None:
            if optional:
                return None
            raise TraceFormatError(f"{self.name}: missing field {where}")
        value = d[key]
        ok = isinstance(value, typ) and not (typ is int and isinstance(value, bool))
        if typ in (int, (int, float)) and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if not ok:
            raise TraceFormatError(
                f"{self.name}: field {where} should be {_typename(typ)}, not {value!r:.40}"
            )
        return value

    def span(self, d, key, path, optional=False):
        s = self.get(d, key, dict, path, optional)
        if s is None:
            return None
        p = f"{path}.{key}"
        return Span(self.get(s, "start_ns", int, p), self.get(s, "end_ns", int, p))

    def param(self, d, path):
        g = lambda k, t, o=False: self.get(d, k, t, path, o)  # noqa: E731
        return Param(g("index", int, True), g("name", str), g("shape", list), g("dtype", str),
                     g("bytes", int), bool(d.get("requires_grad", True)))

    def layout(self, d, path):
        buckets = []
        for i, b in enumerate(self.get(d, "buckets", list, path)):
            p = f"{path}.buckets[{i}]"
            buckets.append(Bucket(self.get(b, "index", int, p), self.get(b, "params", list, p),
                                  self.get(b, "bytes", int, p), self.get(b, "cap_bytes", int, p, True)))
        return Layout(self.get(d, "from_iteration", int, path), self.get(d, "kind", str, path), buckets)

    def iteration(self, d, path):
        g = lambda k, t, o=False: self.get(d, k, t, path, o)  # noqa: E731
        grads = [GradReady(self.get(x, "t_ns", int, f"{path}.grad_ready[{i}]"),
                           self.get(x, "param", int, f"{path}.grad_ready[{i}]"), bool(x.get("unused", False)),
                           self.get(x, "cpu_t_ns", int, f"{path}.grad_ready[{i}]", True))
                 for i, x in enumerate(g("grad_ready", list))]
        buckets = []
        for i, b in enumerate(g("buckets", list)):
            p = f"{path}.buckets[{i}]"
            buckets.append(BucketEvent(*(self.get(b, k, int, p) for k in
                                         ("bucket", "bytes", "ready_ns", "launch_ns", "complete_ns")),
                                       *(self.get(b, k, int, p, True) for k in
                                         ("launch_end_ns", "cpu_launch_ns", "cpu_complete_ns"))))
        bitmap = g("bitmap_allreduce", dict, True)
        if bitmap is not None:
            p = f"{path}.bitmap_allreduce"
            bitmap = Collective(*(self.get(bitmap, k, int, p) for k in ("launch_ns", "complete_ns", "bytes")))
        return Iteration(g("iteration", int), bool(g("sync", bool)), self.span(d, "forward", path),
                         self.span(d, "backward", path), self.span(d, "optimizer", path, True), grads,
                         buckets, self.span(d, "graph_search", path, True), bitmap)

    def rank(self, d, path):
        g = lambda k, t, o=False: self.get(d, k, t, path, o)  # noqa: E731
        return RankTrace(
            rank=g("rank", int), host=d.get("host") or "", pid=g("pid", int, True),
            clock_offset_ns=g("clock_offset_ns", int, True) or 0,
            complete=bool(d.get("complete", True)), error=g("error", str, True),
            layouts=[self.layout(x, f"{path}.layouts[{i}]") for i, x in enumerate(g("layouts", list))],
            iterations=[self.iteration(x, f"{path}.iterations[{i}]")
                        for i, x in enumerate(g("iterations", list))],
            ddp_logging_data=g("ddp_logging_data", dict, True),
        )


def _typename(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return {"int": "an integer", "str": "a string", "list": "a list", "dict": "an object",
            "bool": "true or false"}.get(typ.__name__, typ.__name__)
