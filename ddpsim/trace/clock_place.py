"""Ranks that share no allreduce with the main group of ranks, placed beside it by their steps.

Note [A rank no allreduce ties is placed by its steps]: the ends of shared allreduces put a group of
ranks on one clock (Note [Ranks join a clock through the allreduces they share] in
``ddpsim/trace/clock_groups.py``); a rank that shares none with the main group (a profile without
its allreduces, its steps numbered apart), or a group that shares allreduces only among itself, has
nothing that ties its clock to the main group's. It keeps the clock the profiles share only where
every clock the ends measured is that one (the main group's offsets and its own within the ends'
spread), its first step is within ``SHARED_CLOCK_S`` of the main group's and its synchronised steps
overlap the main group's same steps (Note [One job's ranks overlap in every synchronised step] in
``ddpsim/trace/same_run.py``; with no synchronised step in common, as for a rank without allreduces,
there is nothing to check, and the caution says so). Otherwise its earliest forward of the first step it has in common with the main group (or its
earliest first forward, where none) is put at the main group's earliest forward of that step (or
their first): where the clocks differ, the clock of the main group's reference is no more likely its
own than any other, while the first forward puts it within the main group's spread of starts, at the
cost of hiding how long it waited for them. With the bundled profiles as ranks 0 and 1 (rank 1 on a
clock 3.7 ms ahead) and rank 2 a copy of rank 1's without its allreduces, on either rank's clock,
rank 2's first forward lands 0.5 ms before its copy's, where rank 0's clock would put it 3.8 ms
after on rank 1's (``tests/test_clock_align_ranks.py``). The same test of one clock (first steps
and overlap) decides, where no allreduce matches across ranks, whether all ranks keep the profiles'
clock (``one_clock``, used by ``ddpsim.trace.profile_meta``). The main group is read once, and each
other rank or group against that summary: linear in the ranks' steps.
"""
from __future__ import annotations

from dataclasses import dataclass

from ddpsim.trace.same_run import first_apart, joined, ranks_text, step_spans

SHARED_CLOCK_S = 600.0  # ranks whose first steps start this close (seconds) may share a clock


@dataclass(frozen=True)
class Window:
    """Ranks' steps on their clock: the earliest and latest first forward (ns), ``step_spans``, and
    each step's earliest forward (ns) over the ranks."""

    first: int
    last_first: int
    spans: dict
    forwards: dict


def window(rank_dicts: list[dict], unit: dict[int, int]) -> Window:
    """The ``Window`` of the ranks ``unit`` names (index -> its offset, taken off its times)."""
    ranks, offsets = [rank_dicts[i] for i in unit], list(unit.values())
    firsts = [r["iterations"][0]["forward"]["start_ns"] - o for r, o in zip(ranks, offsets)]
    forwards: dict[int, int] = {}
    for r, o in zip(ranks, offsets):
        for it in r["iterations"]:
            if it.get("forward"):
                n, t = it["iteration"], it["forward"]["start_ns"] - o
                forwards[n] = min(t, forwards.get(n, t))
    return Window(min(firsts), max(firsts), step_spans(ranks, offsets), forwards)


def one_clock(w: Window) -> tuple[str, str] | None:
    """Why the ranks of ``w`` cannot be on one clock, as (kind, words): their first steps
    ``SHARED_CLOCK_S`` or more apart ("far"), or a synchronised step of all of them that does not
    overlap ("apart"); None where they can."""
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
    w = window(rank_dicts, unit)
    if why is None:
        both = Window(min(base.first, w.first), max(base.last_first, w.last_first), joined(base.spans, w.spans), {})
        found = one_clock(both)
        if found is None:
            return "kineto-shared", 0, "overlap" if both.spans else "unchecked"
        why = found[0]
    common = base.forwards.keys() & w.forwards.keys()
    if common:
        n = min(common)
        return "first-forward", w.forwards[n] - base.forwards[n], why
    return "first-forward", w.first - base.first, why


WHY = {"overlap": f"their first step within {SHARED_CLOCK_S:.0f} s of the others', their steps overlapping the "
                  "others' same steps",
       "unchecked": f"their first step within {SHARED_CLOCK_S:.0f} s of the others'; no synchronised step in common "
                    "with the others to check that they overlap",
       "differ": "the others' clocks differ, so none of those is known to be theirs",
       "own": "their own clocks differ, so the profiles share no one clock",
       "far": f"their first step {SHARED_CLOCK_S:.0f} s or more from the others' on the profiles' clocks",
       "apart": "a step of theirs does not overlap the others' same step on the profiles' clocks, as one job's would"}


def place_all(rank_dicts: list[dict], ns: list[int | None], main: list[int], units: list[list[int]],
              why: list[str | None]) -> tuple[dict[int, str], str]:
    """Places each of ``units`` (rank indices; ``ns`` holds each one's offset within its unit, None
    for 0) beside the ranks ``main``, setting ``ns``; ``why`` says, per unit, why it cannot keep the
    profiles' clock whatever its steps (None: its steps decide). Returns each placed rank's method
    and the caution's clause."""
    base = window(rank_dicts, {i: ns[i] for i in main})
    how: dict[int, str] = {}
    said: dict[tuple[str, str], list[int]] = {}
    for unit, reason in zip(units, why):
        inside = {i: ns[i] or 0 for i in unit}
        method, moved, kind = place(rank_dicts, base, inside, reason)
        for i in unit:
            ns[i], how[i] = inside[i] + moved, method
        said.setdefault((method, kind), []).extend(unit)
    return how, _note(rank_dicts, main, units, said)


def _note(rank_dicts: list[dict], main: list[int], units: list[list[int]], said: dict) -> str:
    """One clause: which ranks share no allreduce with the main group's, and how each was placed."""
    def names(idx):
        return ranks_text(sorted(rank_dicts[i]["rank"] for i in idx))
    text = (f"rank(s) {names([i for u in units for i in u])} share no allreduce (by step, order and size) with "
            f"rank(s) {names(main)}")
    groups = [u for u in units if len(u) > 1]
    if groups:
        text += (f" (rank(s) {names([i for u in groups for i in u])} share allreduces only among themselves, in "
                 f"{len(groups)} group(s) each put on one clock by its ends: meta.clock.groups)")
    clauses = [f"rank(s) {names(idx)} kept on the clock the profiles share ({WHY[kind]})" if method == "kineto-shared"
               else f"rank(s) {names(idx)} aligned at the first forward of the first step they have in common with the "
                    f"others (or the others' first, where none), which hides how long they waited for them: {WHY[kind]}"
               for (method, kind), idx in said.items()]
    return text + ": " + "; ".join(clauses)
