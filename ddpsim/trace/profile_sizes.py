"""Sizes and bucket members for an imported profile, from whatever the profile (or the user) gives.

A profile taken with ``torch.profiler``'s defaults (``record_shapes=False``) has no tensor
shapes. What is left, in the order the importer trusts it (``meta.sizes`` says which was used):

1. an allreduce's size from NCCL's own metadata (``record_param_comms``: ``In msg nelems`` x
   the dtype's size), present whatever ``record_shapes`` was;
2. its flat bucket's shape (``Input Dims`` of ``c10d::allreduce_``, only with ``record_shapes``);
3. the sum of its members' sizes (source ``members``), when the parameters' sizes are known (the gradients'
   ``AccumulateGrad`` shapes, or the user's model: ``import --model path.py:factory``);
4. otherwise unknown: the trace loads and shows, and whatever needs sizes refuses
   (``unknown_sizes``).

Note [A bucket's last gradient launches its allreduce]: reducer.cpp's ``autograd_hook`` runs
right after a gradient's ``AccumulateGrad`` on the autograd thread; when that gradient is the
last of its bucket, ``mark_variable_ready`` -> ``mark_bucket_ready`` launches the bucket's
allreduce from inside the same hook. So the gradients whose ``AccumulateGrad`` started before
an allreduce's launch are exactly its bucket and the buckets before it, sizes or not (on the H100
profiles the launch follows the last member's ``AccumulateGrad`` by 30-130 us, on its thread).
"""
from __future__ import annotations

from ddpsim.buckets import SCALAR_TYPES
from ddpsim.trace import TraceFormatError
from ddpsim.trace.profile_job import event
from ddpsim.trace.reader import MAX_BYTES

UNKNOWN = "unknown"
DTYPE_BYTES = {"float": 4, "float32": 4, "half": 2, "float16": 2, "bfloat16": 2, "double": 8,
               "float64": 8, "int": 4, "int32": 4, "long": 8, "long int": 8, "int64": 8}
HOW_TO_KNOW = ("profile with torch.profiler.profile(record_shapes=True), or import again with "
               "--model path.py:factory (the model's parameter shapes, read on the meta device)")


class UnknownSizesError(ValueError):
    """A simulation asked of a trace whose parameter or allreduce sizes are unknown."""


def _dims(shape) -> bool:
    """``shape`` is a list of dimensions (ints, not booleans, >= 0), as a profile's ``Input Dims`` holds."""
    return isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)


def _numel(dims: list[int]) -> int:
    """The elements of a tensor of these dimensions, no more than just past ``MAX_BYTES`` (one multiplication
    per dimension, of numbers that stay small, however many dimensions a hostile profile gives)."""
    if 0 in dims:
        return 0
    numel = 1
    for d in dims:
        numel *= d
        if numel > MAX_BYTES:
            return MAX_BYTES + 1
    return numel


def _bounded(nbytes: int, op, name: str, what: str) -> int:
    """``nbytes``, or one TraceFormatError naming the profile and the event when no trace could hold it."""
    if not 0 <= nbytes <= MAX_BYTES:
        raise TraceFormatError(f"{name}: {event(op.name, op.start)}: its {what} gives "
                               f"{'more than ' if nbytes > MAX_BYTES else ''}{min(nbytes, MAX_BYTES)} bytes; a trace "
                               f"holds sizes from 0 to {MAX_BYTES} (1 PiB)")
    return nbytes


def collective_bytes(op, profile) -> tuple[int | None, str]:
    """(bytes, where they came from) of a ``c10d::allreduce_`` (a kineto ``Op`` of a ``Profile``):
    NCCL's ``record_param_comms`` (``In msg nelems`` x the dtype's size) inside it, present without
    ``record_shapes``; else its ``Input Dims`` (record_shapes) as float32; else (None, "unknown").
    A size no trace holds (negative, past ``MAX_BYTES``) is a TraceFormatError naming the file and event."""
    for inner in profile.named("record_param_comms", within=op):
        n = inner.args.get("In msg nelems")
        if isinstance(n, int) and not isinstance(n, bool):
            size = DTYPE_BYTES.get(str(inner.args.get("dtype", "float")).lower(), 4)
            return _bounded(n * size, inner, profile.name, "args.\"In msg nelems\""), "nccl metadata"
    dims = op.args.get("Input Dims")
    if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] and _dims(dims[0][0]):
        return _bounded(_numel(dims[0][0]) * 4, op, profile.name, "args.\"Input Dims\""), "profile shapes"
    return None, UNKNOWN


def tensor_shape(op, name: str = "profile") -> tuple[list[int] | None, str]:
    """(shape, dtype) of an op's first input, from record_shapes' ``Input Dims`` / ``Input type``; no shape
    where the dimensions are not integers >= 0. A tensor no trace holds is a TraceFormatError naming
    ``name`` (the profile) and the event."""
    dims, types = op.args.get("Input Dims"), op.args.get("Input type")
    shape = dims[0] if isinstance(dims, list) and dims and _dims(dims[0]) else None
    dtype = str(types[0]) if isinstance(types, list) and types else "float"
    dtype = {"float": "float32", "half": "float16", "double": "float64",
             "c10::bfloat16": "bfloat16", "c10::half": "float16"}.get(dtype.lower(), dtype.lower())
    dtype = dtype if dtype in SCALAR_TYPES else "float32"  # a type the profile names oddly
    if shape is not None:
        _bounded(_numel(shape) * DTYPE_BYTES.get(dtype, 4), op, name, "args.\"Input Dims\"")
    return shape, dtype


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


def layout_by_sizes(sizes: dict[int, int], order: list[int], bucket_bytes: list[int]) -> list[list[int]] | None:
    """Bucket members: consecutive parameters in ready order, filled to each bucket's size (the
    rebuilt layout is built in ready order). None when the sizes do not add up."""
    out, pos = [], 0
    for nbytes in bucket_bytes:
        members, total = [], 0
        while pos < len(order) and total < nbytes:
            members.append(order[pos])
            total += sizes[order[pos]]
            pos += 1
        if total != nbytes or not members:
            return None
        out.append(members)
    return out if pos == len(order) else None


def layout_by_launch(order: list[int], ready_before: list[int]) -> list[list[int]] | None:
    """Bucket members from how many gradients were ready before each allreduce's launch
    (Note [A bucket's last gradient launches its allreduce]); None when that is not a layout."""
    counts = [*ready_before[:-1], len(order)] if ready_before else []  # the last bucket takes the rest
    if not counts or any(b <= a for a, b in zip([0, *counts], counts)) or counts[-1] > len(order):
        return None
    return [order[a:b] for a, b in zip([0, *counts], counts)]


def match_model(model, ready_shapes: list[tuple]) -> list[int]:
    """The model's parameters against the profile's gradients: the DDP index of the k-th ready
    gradient. A different count, or (when the profile has shapes) a different shape, is one
    TraceFormatError naming the first difference."""
    n, params = len(ready_shapes), model.params
    if n != len(params):
        raise TraceFormatError(f"the profile has {n} gradients per step but {model.spec} has "
                               f"{len(params)} parameters that require gradients")
    for k, ((shape, _), i) in enumerate(zip(ready_shapes, model.ready_order)):
        if shape is not None and list(shape) != params[i]["shape"]:
            raise TraceFormatError(f"gradient {k + 1} in the profile's ready order has shape {list(shape)} "
                                   f"but {model.spec}'s ({params[i]['name']}) has {params[i]['shape']}")
    return list(model.ready_order)


def bucket_members(params: list[dict], order: list[int], events: list[dict], notes: set) -> list[list[int]]:
    """Bucket members: by the allreduce sizes when they add up, else by when each was launched
    (Note [A bucket's last gradient launches its allreduce])."""
    sizes = [b["bytes"] for b in events]
    known = {p["index"]: p["bytes"] for p in params}
    found = layout_by_sizes(known, order, sizes) if None not in sizes else None
    found = found or layout_by_launch(order, [b["ready_before"] for b in events])
    if found is None:
        notes.add("bucket members could not be recovered (neither the allreduce sizes nor their "
                  "launch times give a layout); only their sizes are known")
        return [[] for _ in events]
    return found


def bucket_sizes(events: list[dict], members: list[list[int]], params: list[dict], sources: set) -> None:
    """Each allreduce's size: its own (metadata, shape), else its members' sum when the parameters'
    sizes are known, else 0 with the source ``unknown`` (the module doc)."""
    size = {p["index"]: p["bytes"] for p in params}
    params_known = all(p["bytes"] > 0 for p in params)
    for ev, m in zip(events, members or [[] for _ in events]):
        ev.pop("ready_before", None)
        if ev["bytes"] is None and params_known and m:
            ev["bytes"], ev["source"] = sum(size[i] for i in m), "members"
        elif ev["bytes"] is None:
            ev["bytes"] = 0
        sources.add(ev.pop("source"))


def size_meta(params_source: str, bucket_sources: set[str]) -> dict:
    """``meta.sizes``: where the parameter and the allreduce sizes came from (module doc)."""
    buckets = UNKNOWN if UNKNOWN in bucket_sources else (", ".join(sorted(bucket_sources)) or "no allreduce")
    return {"params": params_source, "buckets": buckets}


def unknown_sizes(trace) -> str | None:
    """Why this trace cannot be simulated, in one line, or None. Every simulation builds its
    buckets from the parameters' sizes and prices each allreduce by its bytes, so a trace whose
    parameter or allreduce sizes are unknown is refused whole (no network is fitted from it)."""
    sizes = (trace.meta or {}).get("sizes")
    if not isinstance(sizes, dict):
        return None
    missing = [what for key, what in (("params", "parameter"), ("buckets", "allreduce"))
               if sizes.get(key) == UNKNOWN]
    if not missing:
        return None
    name = trace.meta.get("model") or "this trace"
    return (f"{name}: the {' and '.join(missing)} sizes are unknown (a profile taken without "
            f"record_shapes), and a simulation needs them: {HOW_TO_KNOW}")


def is_bitmap(op, profile=None, gloo_run=None) -> bool:
    """find_unused_parameters' used-parameter map (``op`` a kineto ``Op`` of a ``Profile``): an int32 allreduce (reducer.cpp local_used_map_),
    by its input type (record_shapes: the collective's own, or gloo's run of it where the collective
    names only a ``TensorList``, as torch 2.13's profiler does) or NCCL's metadata dtype."""
    for o in (op, gloo_run):
        types = o.args.get("Input type") if o is not None else None
        if isinstance(types, list) and types and str(types[0]) != "TensorList":
            return "int" in str(types[0]).lower()
    meta = profile.named("record_param_comms", within=op) if profile is not None else []
    return any("int" in str(m.args.get("dtype", "")).lower() for m in meta[:1])
