"""Whether ranks' steps can belong to one run: the same synchronised step overlaps on every rank.

Note [One job's ranks overlap in every synchronised step]: a step that allreduces gradients ends
on each rank only after every rank launched the step's last bucket (finalize_backward waits for
the allreduce, and an allreduce completes only when every rank has joined it), so on one clock
the same synchronised step of two ranks always overlaps. Steps that do not overlap come from
clocks that differ (profiles of several hosts), or from different runs (a log folder, or shards
gathered from two torchrun jobs). Used by the profile import (``profile_meta.align``) and by
``ddpsim merge`` (``ddpsim.record.merge``). ``quiet_ranks``: the ranks of a trace with no step at all.
"""
from __future__ import annotations


def apart(rank_dicts: list[dict], offsets: list[int] | None = None) -> tuple[int, int] | None:
    """(step, ns) of the first synchronised step that every rank has and that does not overlap
    across them, with the gap between the latest start and the earliest end; or None. Each rank
    is a trace dict's rank (``iterations`` with ``sync``, ``forward``, ``backward``, ``optimizer``);
    ``offsets``: each rank's clock offset (ns), taken off its times first."""
    return first_apart(step_spans(rank_dicts, offsets))


def step_spans(rank_dicts: list[dict], offsets: list[int] | None = None,
               every: bool = False) -> dict[int, tuple[int, int]]:
    """Each synchronised step (each step, if ``every``) that every rank has -> (the latest start, the
    earliest end) over the ranks, each rank's offset taken off its times: ``apart``'s test of a group
    of ranks, which ``joined`` extends to a rank more without reading the group again."""
    out: dict[int, tuple[int, int]] | None = None
    for r, o in zip(rank_dicts, offsets or [0] * len(rank_dicts)):
        mine = {it["iteration"]: (it["forward"]["start_ns"] - o, (it.get("optimizer") or it["backward"])["end_ns"] - o)
                for it in r["iterations"]
                if (every or it.get("sync", True)) and it.get("forward") and it.get("backward")}
        out = mine if out is None else joined(out, mine)
    return out or {}


def joined(a: dict[int, tuple[int, int]], b: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """``step_spans`` of two groups of ranks together: the steps both have (read from the fewer)."""
    few, many = (a, b) if len(a) <= len(b) else (b, a)
    return {n: (max(a[n][0], b[n][0]), min(a[n][1], b[n][1])) for n in few if n in many}


def first_apart(spans: dict[int, tuple[int, int]]) -> tuple[int, int] | None:
    """``apart`` of ``step_spans``: the first step whose latest start is after its earliest end."""
    for number in sorted(spans):
        start, end = spans[number]
        if start > end:
            return number, start - end
    return None


def ranks_text(ranks: list[int], most: int = 8) -> str:
    """Ranks as a reader takes them in: "2, 3" or "0, 1, ... 7 and 56 more"."""
    return ", ".join(map(str, ranks[:most])) + (f" and {len(ranks) - most} more" if len(ranks) > most else "")


def quiet_ranks(trace) -> str | None:
    """A caution when some of ``trace``'s ranks (a ``Trace``) recorded no iteration (they failed or were
    stopped before one) while others did: what is learned from the trace comes from the others alone."""
    quiet = [r.rank for r in trace.ranks if not r.iterations]
    heard = [r.rank for r in trace.ranks if r.iterations]
    if not (quiet and heard):
        return None
    return f"Rank(s) {ranks_text(quiet)} recorded no iteration: the workload is learned from rank(s) {ranks_text(heard)} alone."
