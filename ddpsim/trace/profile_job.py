"""The profiles being imported together come from one DDP job: one rank each, one model, one layout.

A log folder easily holds more than one run (``tensorboard_trace_handler`` names its files by
host, pid and time, and a schedule with ``repeat > 1`` writes a file per cycle), and the files of
two runs, or of two models, read alike. DDP itself guarantees what one job's ranks share, so the
import checks exactly that and names the files that disagree, instead of writing a trace whose
ranks belong to different runs:

- each rank is one process: no two profiles claim the same rank;
- every rank trains the same parameters (DDP's constructor checks this across processes:
  ``_verify_param_shape_across_processes`` in torch/nn/parallel/distributed.py), so every rank's
  backward makes the same number of gradients, of the same shapes when the profile has them
  (unless find_unused_parameters lets a rank leave some out: the profile then shows its bitmap);
- every rank has the same buckets (rank 0's rebuilt layout is broadcast to all: reducer.cpp
  ``rebuild_buckets``), so the allreduces of a step have the same sizes on every rank;
- the ranks ran on the same kind of device (one process group's ranks all use NCCL or all gloo).

What a profile says of its job (``distributedInfo``: rank, world size, backend; ``deviceProperties``)
is checked as it is read (``header``): a field of the wrong type, or a world size past the trace
reader's ``MAX_WORLD_SIZE``, is one TraceFormatError naming the file and the field.
"""
from __future__ import annotations

from pathlib import Path

from ddpsim import kinds
from ddpsim.trace import TraceFormatError
from ddpsim.trace.checks import MAX_WORLD_SIZE
from ddpsim.trace.profile_meta import CAUTION
from ddpsim.trace.same_run import ranks_text

ONE_RUN = "import one run's profiles together (one file per rank)"


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


def one_per_rank(claims: list[tuple[int, str]]) -> None:
    """``claims``: (rank, file) per profile; two files claiming one rank is one error naming both."""
    first: dict[int, str] = {}
    for rank, name in claims:
        if rank in first:
            raise TraceFormatError(f"{first[rank]} and {name} both claim rank {rank} (a folder holding two runs, "
                                   f"or a schedule with repeat > 1 writing a file per cycle): {ONE_RUN}")
        first[rank] = name


def same_model(ranks: list[tuple[int, object]], find_unused: bool) -> None:
    """``ranks``: (rank, RankImport) after their steps were read; different gradients or devices
    across ranks are one error naming the first two files that differ. ``find_unused``: the profiles
    show the used-parameter bitmap's allreduce, so a rank may leave parameters out of a step
    (find_unused_parameters) and only the devices are compared."""
    (r0, a), rest = ranks[0], ranks[1:]
    for r, b in rest:
        if a.gpu != b.gpu:
            gpu, cpu = (r0, a) if a.gpu else (r, b), (r, b) if a.gpu else (r0, a)
            raise TraceFormatError(f"rank {gpu[0]}'s profile ({gpu[1].p.name}) has GPU work but rank {cpu[0]}'s "
                                   f"({cpu[1].p.name}) has none: not one DDP job; {ONE_RUN}")
        if find_unused:
            continue
        if len(a.ready_shapes) != len(b.ready_shapes):
            raise TraceFormatError(f"rank {r0}'s profile ({a.p.name}) makes {len(a.ready_shapes)} gradients per "
                                   f"step but rank {r}'s ({b.p.name}) {len(b.ready_shapes)}: profiles of different "
                                   f"models or runs; {ONE_RUN}")
        shapes = [sorted(str(s) for s, _ in imp.ready_shapes) for imp in (a, b)]
        known = all(s is not None for imp in (a, b) for s, _ in imp.ready_shapes)
        if known and shapes[0] != shapes[1]:
            raise TraceFormatError(f"rank {r0}'s profile ({a.p.name}) and rank {r}'s ({b.p.name}) have gradients of "
                                   f"different shapes: profiles of different models; {ONE_RUN}")


def same_buckets(rank_dicts: list[dict], names: list[str]) -> None:
    """The allreduce sizes of each rank's last layout, where all are known, agree across ranks."""
    def sizes(r):
        buckets = r["layouts"][-1]["buckets"]
        return [b["bytes"] for b in buckets] if buckets and all(b["bytes"] for b in buckets) else None
    known = [(r["rank"], name, s) for r, name in zip(rank_dicts, names) if (s := sizes(r)) is not None]
    for rank, name, s in known[1:]:
        if s != known[0][2]:
            raise TraceFormatError(f"rank {known[0][0]}'s profile ({known[0][1]}) has buckets of {known[0][2]} bytes "
                                   f"but rank {rank}'s ({name}) {s}: DDP gives every rank the same buckets, so "
                                   f"these are different runs; {ONE_RUN}")


def shown(value) -> str:
    """A JSON value as a message shows it: its JSON text, cut at 40 characters."""
    return kinds.shown(value, 40)


def event(name, ts) -> str:
    """A profile's event as a message names it: its name and its start (``ts``, us), as JSON text."""
    return f"event {shown(name)} at ts {shown(ts)}"


def _whole(value, lo: int, hi: int) -> bool:
    return type(value) is int and lo <= value <= hi


def header(data: dict, name: str) -> tuple[dict, list[dict]]:
    """A profile's ``distributedInfo`` ({} when it has none) and ``deviceProperties`` ([] when none),
    checked: a field of the wrong type or out of range is one TraceFormatError naming ``name`` and it."""
    info, devices = data.get("distributedInfo"), data.get("deviceProperties")
    info = {} if info is None else info
    devices = [] if devices is None else devices
    if not isinstance(info, dict):
        raise TraceFormatError(f"{name}: distributedInfo should be an object, not {shown(info)}")
    world = info.get("world_size", MAX_WORLD_SIZE)
    if not _whole(world, 1, MAX_WORLD_SIZE):
        raise TraceFormatError(f"{name}: distributedInfo.world_size should be an integer from 1 to "
                               f"{MAX_WORLD_SIZE:,}, not {shown(world)}")
    if "rank" in info and not _whole(info["rank"], 0, world - 1):
        raise TraceFormatError(f"{name}: distributedInfo.rank should be an integer from 0 to {world - 1:,}"
                               f"{' (below its world_size)' if 'world_size' in info else ''}, not {shown(info['rank'])}")
    if not isinstance(info.get("backend", ""), str):
        raise TraceFormatError(f"{name}: distributedInfo.backend should be a string, not {shown(info['backend'])}")
    if not isinstance(devices, list) or not all(isinstance(d, dict) for d in devices):
        raise TraceFormatError(f"{name}: deviceProperties should be a list of objects, not {shown(devices)}")
    if devices and not isinstance(devices[0].get("name", ""), str):
        raise TraceFormatError(f"{name}: deviceProperties[0].name should be a string, not {shown(devices[0]['name'])}")
    return info, devices


def missing_ranks(infos: list[dict], ranks: list[int]) -> str | None:
    """A note when the profiles' own world size names ranks that are not among them: the first few
    named, found without listing every rank of the world (which may be ``MAX_WORLD_SIZE``)."""
    sizes = {i["world_size"] for i in infos if isinstance(i.get("world_size"), int)}
    if not sizes:
        return None
    if len(sizes) > 1:
        raise TraceFormatError(f"the profiles name different world sizes {sorted(sizes)}: {ONE_RUN}")
    world, present = sizes.pop(), set(ranks)
    count = world - len({r for r in present if 0 <= r < world})
    if not count:
        return None
    first, k = [], 0
    while len(first) < 8 and k < world:  # the lowest absent ranks, in at most len(present) + 8 turns
        if k not in present:
            first.append(k)
        k += 1
    text = ranks_text(first) + (f" and {count - len(first)} more" if count > len(first) else "")
    return f"{CAUTION}the profiles are of world size {world} but no profile of rank(s) {text} is among them"
