"""Ranks grouped by the allreduces they ran together, each group put on one clock by their ends.

Note [Ranks join a clock through the allreduces they share]: two ranks whose allreduces match (by
step, order and size) can be put on one clock by those allreduces' ends (Note [A collective ends at
once on every rank] in ``ddpsim/trace/clock_align.py``), and a rank that shares allreduces with any
rank of a group joins that group's clock. The groups are the connected pieces of ranks linked by
shared allreduces: every rank profiled the same steps, one group; two ranks that profiled step 4 and
two others step 6, two groups, each on a clock of its own, with nothing to tell one group's clock
from the other's. Each group's reference is the rank whose allreduces the most others ran (the
lowest of those tied), and its ranks are measured breadth-first: first those that share an
allreduce with the reference, against its ends; then those that share one with the ranks just
measured, against the ends they added on the reference's clock; and so on. An index of which ranks
ran each allreduce makes each allreduce's ends read once and each rank measured once: linear in
ranks x allreduces (``benchmarks/bench_clock_align.py``). The groups come largest first (most ranks,
then the reference whose allreduces most others ran, then the lowest): the first is the one the
others and the ranks that share no allreduce are placed against (``ddpsim.trace.clock_place``).
"""
from __future__ import annotations

from collections import defaultdict

from ddpsim.trace.clock_align import Offset, collective_ends, offset_from


def estimate(rank_dicts: list[dict]) -> list[dict[int, Offset]]:
    """The groups of ranks that share allreduces, largest first (Note [Ranks join a clock through the
    allreduces they share]): each maps a rank's index in ``rank_dicts`` to its offset from its group's
    reference. A rank that shares no allreduce is in none; none when no two ranks share one. Pops
    ``END`` from every bucket."""
    ends = collective_ends(rank_dicts)
    holders: dict[tuple, list[int]] = defaultdict(list)  # each allreduce -> the ranks that ran it
    for i, mine in enumerate(ends):
        for key in mine:
            holders[key].append(i)
    shares = [sum(len(holders[key]) - 1 for key in mine) for mine in ends]
    pieces = _pieces(ends, holders, shares)
    refs = [max(piece, key=lambda i: (shares[i], -i)) for piece in pieces]
    order = sorted(range(len(pieces)), key=lambda g: (-len(pieces[g]), -shares[refs[g]], refs[g]))
    ranks = [r["rank"] for r in rank_dicts]
    return [_measured(refs[g], ends, holders, ranks) for g in order]


def _pieces(ends: list[dict], holders: dict, shares: list[int]) -> list[list[int]]:
    """The connected pieces of two or more ranks linked by shared allreduces (rank indices)."""
    seen, read, out = set(), set(), []  # ranks met, allreduces whose ranks were read
    for start in range(len(ends)):
        if start in seen or shares[start] == 0:
            continue
        seen.add(start)
        piece, todo = [], [start]
        while todo:
            i = todo.pop()
            piece.append(i)
            for key in ends[i].keys() - read:
                read.add(key)
                todo += [j for j in holders[key] if j not in seen]
                seen.update(holders[key])
        out.append(sorted(piece))
    return out


def _measured(ref: int, ends: list[dict], holders: dict, ranks: list[int]) -> dict[int, Offset]:
    """Each rank of ``ref``'s group -> its offset from ``ref``, breadth-first from ``ref``: each
    layer against the ends on ``ref``'s clock of the layers before it."""
    common = dict(ends[ref])  # each allreduce's end on the reference's clock
    out = {ref: Offset(ranks[ref], 0, 0, sum(len(holders[key]) > 1 for key in ends[ref]), ranks[ref])}
    fresh = list(common)  # allreduces just put on the reference's clock
    while fresh:
        layer = sorted({j for key in fresh for j in holders[key] if j not in out})
        for j in layer:
            out[j] = offset_from(ranks[j], ends[j], common, ranks[ref])
        fresh = []
        for j in layer:
            for key, end in ends[j].items():
                if key not in common:
                    common[key] = end - out[j].ns
                    fresh.append(key)
    return out
