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
"""
from __future__ import annotations

from ddpsim.trace import TraceFormatError
from ddpsim.trace.profile_meta import CAUTION
from ddpsim.trace.same_run import ranks_text

ONE_RUN = "import one run's profiles together (one file per rank)"


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


def missing_ranks(infos: list[dict], ranks: list[int]) -> str | None:
    """A note when the profiles' own world size names ranks that are not among them."""
    sizes = {int(i["world_size"]) for i in infos if isinstance(i.get("world_size"), int)}
    if not sizes:
        return None
    if len(sizes) > 1:
        raise TraceFormatError(f"the profiles name different world sizes {sorted(sizes)}: {ONE_RUN}")
    world = sizes.pop()
    absent = sorted(set(range(world)) - set(ranks))
    if not absent:
        return None
    return f"{CAUTION}the profiles are of world size {world} but no profile of rank(s) {ranks_text(absent)} is among them"
