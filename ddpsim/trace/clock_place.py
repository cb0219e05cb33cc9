"""Ranks that share no allreduce with the main group of ranks, placed beside it by their steps.

Note [A rank no allreduce ties is placed by its steps]: the ends of shared allreduces put a group of
ranks on one clock (Note [Ranks join a clock through the allreduces they share] in
``ddpsim/trace/clock_groups.py``); a rank that shares none with the main group (a profile without
its allreduces, its steps numbered apart), or a group that shares allreduces only among itself, has
nothing that ties its clock to the main group's. In one DDP job a rank cannot skip an allreduce the
others ran, so each step the main group synchronised was synchronised on every rank, whether or not
its profile holds the allreduces. The rank keeps the clock the profiles share only where every clock
the ends measured is that one (the main group's offsets and its own within the ends' spread), its
first step is within ``SHARED_CLOCK_S`` of the main group's, and its steps overlap the main group's
synchronised steps of the same numbers (Note [One job's ranks overlap in every synchronised step] in
``ddpsim/trace/same_run.py``; with no step numbered as one of those there is nothing to check, and
the caution says so). Otherwise its earliest forward of the first step it has in common with the
main group is put at the main group's earliest forward of that step; with no step in common, its
earliest forward of its first step n is put at the main group's of its first step m plus n - m of
the main group's step periods (the median forward-to-forward time per step number, or the length of
its step where it profiled one), so the steps keep their order. Where the clocks differ, the clock of
the main group's reference is no more likely its own than any other, while a forward puts it within
the main group's spread of starts, at the cost of hiding how long it waited for them; the shift it
adds is ``meta.clock.placed_ns``. With the bundled profiles as ranks 0 and 1 (rank 1 on a clock
3.7 ms ahead) and rank 2 a copy of rank 1's without its allreduces, on either rank's clock, rank 2's
first forward lands 0.5 ms before its copy's, where rank 0's clock would put it 3.8 ms after on rank
1's (``tests/test_clock_align_ranks.py``); a copy of rank 0's 50 ms later on their shared clock
misses their steps and is put at rank 0's, the iteration 44.9 ms, not 94.9 ms; a group at step 6
beside ranks that profiled steps 4-5 lands 157.9 ms after their step 4, 5.1 ms before the truth
(``tests/test_clock_place.py``). The same test of one clock (first steps and overlap) decides, where
no allreduce matches across ranks, whether all ranks keep the profiles' clock (``one_clock``, used by
``ddpsim.trace.profile_meta``). The main group is read once, and each other rank or group against
that summary: linear in the ranks' steps (``benchmarks/bench_clock_align.py``).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

from ddpsim.trace.clock_align import LISTED, time_text
from ddpsim.trace.same_run import first_apart, joined, ranks_text, step_spans

SHARED_CLOCK_S = 600.0  # ranks whose first steps start this close (seconds) may share a clock


@dataclass(frozen=True)
class Window:
    """Ranks' steps on their clock: the earliest and latest first forward (ns), ``step_spans``, each
    step's earliest forward (ns) over the ranks, and the median step period (ns; ``_period``)."""

    first: int
    last_first: int
    spans: dict
    forwards: dict
    period: int


def window(rank_dicts: list[dict], unit: dict[int, int], every: bool = False) -> Window:
    """The ``Window`` of the ranks ``unit`` names (index -> its offset, taken off its times); its
    ``spans`` over each step they all have if ``every``, else over their synchronised steps."""
    ranks, offsets = [rank_dicts[i] for i in unit], list(unit.values())
    firsts = [r["iterations"][0]["forward"]["start_ns"] - o for r, o in zip(ranks, offsets)]
    forwards: dict[int, int] = {}
    ends: dict[int, int] = {}
    for r, o in zip(ranks, offsets):
        for it in r["iterations"]:
            if it.get("forward"):
                n, t = it["iteration"], it["forward"]["start_ns"] - o
                forwards[n] = min(t, forwards.get(n, t))
                end = (it.get("optimizer") or it.get("backward") or it["forward"])["end_ns"] - o
                ends[n] = max(end, ends.get(n, end))
    return Window(min(firsts), max(firsts), step_spans(ranks, offsets, every), forwards, _period(forwards, ends))


def _period(forwards: dict[int, int], ends: dict[int, int]) -> int:
    """The median, over consecutive steps, of forward to next forward per step number between; with
    one step, its length (earliest forward to latest end)."""
    steps = sorted(forwards)
    gaps = [(forwards[b] - forwards[a]) / (b - a) for a, b in zip(steps, steps[1:])]
    return int(round(statistics.median(gaps or [ends[n] - forwards[n] for n in steps])))


def one_clock(w: Window) -> tuple[str, str] | None:
    """Why the ranks of ``w`` cannot be on one clock, as (kind, words): their first steps
    ``SHARED_CLOCK_S`` or more apart ("far"), or a step of ``w.spans`` that does not overlap across
    them ("apart"); None where they can."""
    if w.last_first - w.first >= SHARED_CLOCK_S * 1e9:
        return "far", f"the ranks' first steps are {(w.last_first - w.first) / 1e9:.0f} s apart on the profiles' clocks"
    found = first_apart(w.spans)
    return None if found is None else ("apart", (
        f"ProfilerStep#{found[0]} does not overlap across ranks on the profiles' clocks (one rank's starts "
        f"{found[1] / 1e6:.1f} ms after another's ends), as one job's ranks always do"))


def place(rank_dicts: list[dict], base: Window, unit: dict[int, int], why: str | None) -> tuple[str, int, str]:
    """How the ranks ``unit`` names (index -> offset within them) go beside the main group's
    ``base`` (Note [A rank no allreduce ties is placed by its steps]): (the method, the ns added to
    each offset, why: "overlap" or "unchecked" where kept, else ``why`` or ``one_clock``'s kind)."""
    w = window(rank_dicts, unit, every=True)  # the main group's synchronised steps were every rank's
    if why is None:
        both = Window(min(base.first, w.first), max(base.last_first, w.last_first), joined(base.spans, w.spans), {}, 0)
        found = one_clock(both)
        if found is None:
            return "kineto-shared", 0, "overlap" if both.spans else "unchecked"
        why = found[0]
    common = [n for n in w.forwards if n in base.forwards]
    if common:
        n = min(common)
        return "first-forward", w.forwards[n] - base.forwards[n], why
    n, m = min(w.forwards), min(base.forwards)
    return "first-forward", w.forwards[n] - base.forwards[m] - (n - m) * base.period, why


WHY = {"overlap": f"their first step within {SHARED_CLOCK_S:.0f} s of the others', their steps overlapping the "
                  "others' synchronised steps of the same numbers",
       "unchecked": f"their first step within {SHARED_CLOCK_S:.0f} s of the others'; none of their steps is "
                    "numbered as a step the others synchronised, to check that they overlap",
       "differ": "the others' clocks differ, so none of those is known to be theirs",
       "own": "their own clocks differ, so the profiles share no one clock",
       "far": f"their first step {SHARED_CLOCK_S:.0f} s or more from the others' on the profiles' clocks",
       "apart": "a step of theirs does not overlap the others' synchronised step of that number on the profiles' "
                "clocks, as one job's would"}


def place_all(rank_dicts: list[dict], ns: list[int | None], main: list[int], units: list[list[int]],
              why: list[str | None]) -> tuple[dict[int, str], dict[int, int], str]:
    """Places each of ``units`` (rank indices, a group's reference first; ``ns`` holds each one's
    offset within its unit, None for 0) beside the ranks ``main``, setting ``ns``; ``why`` says, per
    unit, why it cannot keep the profiles' clock whatever its steps (None: its steps decide). Returns
    each placed rank's method, the ns its steps added to the offset of each rank placed at a first
    forward, and the caution's clause."""
    base = window(rank_dicts, {i: ns[i] for i in main})
    how: dict[int, str] = {}
    shifts: dict[int, int] = {}
    said: dict[tuple[str, str], list[int]] = {}
    groups = []  # each group's offsets within it
    for unit, reason in zip(units, why):
        inside = {i: ns[i] or 0 for i in unit}
        method, moved, kind = place(rank_dicts, base, inside, reason)
        for i in unit:
            ns[i], how[i] = inside[i] + moved, method
        shifts.update({i: moved for i in unit} if method == "first-forward" else {})
        said.setdefault((method, kind), []).extend(unit)
        groups += [inside] if len(unit) > 1 else []
    return how, shifts, _note(rank_dicts, main, units, groups, said)


def _note(rank_dicts: list[dict], main: list[int], units: list[list[int]], groups: list[dict], said: dict) -> str:
    """One clause: which ranks share no allreduce with the main group's, and how each was placed."""
    def names(idx):
        return ranks_text(sorted(rank_dicts[i]["rank"] for i in idx))
    text = (f"rank(s) {names([i for u in units for i in u])} share no allreduce (by step, order and size) with "
            f"rank(s) {names(main)}")
    if groups:
        more = f" and {len(groups) - LISTED} more" if len(groups) > LISTED else ""
        text += (f" ({len(groups)} group(s) of them share allreduces only among themselves: "
                 f"{'; '.join(_group(rank_dicts, g) for g in groups[:LISTED])}{more}; meta.clock.groups)")
    clauses = [f"rank(s) {names(idx)} kept on the clock the profiles share ({WHY[kind]})" if method == "kineto-shared"
               else f"rank(s) {names(idx)} aligned at the first forward of the first step they have in common with the "
                    "others (where none, at the others' first forward plus the step numbers between times the others' "
                    f"median step period, so the steps keep their order), which hides how long they waited for them: "
                    f"{WHY[kind]}"
               for (method, kind), idx in said.items()]
    return text + ": " + "; ".join(clauses)


def _group(rank_dicts: list[dict], offsets: dict[int, int]) -> str:
    """A group's ranks and how its ends put them on one clock: as they were, or each moved by its offset."""
    ranks = [rank_dicts[i]["rank"] for i in offsets]  # the first is the group's reference
    moved = [f"rank {rank_dicts[i]['rank']} {time_text(ns)}" for i, ns in offsets.items() if ns]
    if not moved:
        return f"rank(s) {ranks_text(sorted(ranks))}, their ends on one clock"
    listed = ", ".join(moved[:3]) + (f" and {len(moved) - 3} more" if len(moved) > 3 else "")
    return f"rank(s) {ranks_text(sorted(ranks))}, moved onto rank {ranks[0]}'s clock by their ends ({listed})"
