"""The imported trace assembled: its ranks on one clock, its meta and what the import could not say.

Kept apart from ``profile_import`` (which reads each rank's steps) so each stays one idea.
"""
from __future__ import annotations

from pathlib import Path

from ddpsim.trace import FORMAT, VERSION
from ddpsim.trace.clock_align import clock_meta, estimate, note, scatter, shared
from ddpsim.trace.same_run import apart, ranks_text

SHARED_CLOCK_S = 600.0  # ranks whose first steps start this close (seconds) share a clock
CAUTION = "caution: "  # an import note that ``ddpsim import`` also prints (the others are on the Timeline)


def align(rank_dicts: list[dict]) -> tuple[dict, str | None]:
    """Puts the ranks on one clock, in place (times from the earliest first forward); returns
    ``meta.clock`` and a note when the clocks differed or could not be trusted. Offsets come from
    the ends of the allreduces the ranks ran (Note [A collective ends at once on every rank] in
    ddpsim/trace/clock_align.py): within their own spread the profiles keep the clock they share
    (Kineto uses the host's). A rank that matches no other rank's allreduce is placed by itself
    (``_lone``); where none matches, every rank is (``_unmatched``)."""
    offsets = estimate(rank_dicts)
    placed = [o for o in offsets if o is not None]
    if not placed:
        return _unmatched(rank_dicts)
    kept = shared(placed)
    ns = [None if o is None else 0 if kept else o.ns for o in offsets]
    if not kept:
        found = apart([r for r, o in zip(rank_dicts, offsets) if o is not None], [o.ns for o in placed])
        if found is not None:
            return _first_forward(rank_dicts), (
                f"{CAUTION}ProfilerStep#{found[0]} does not overlap across ranks even with the clocks aligned on "
                f"the allreduces' ends (one rank's starts {found[1] / 1e6:.1f} ms after another's ends), as one "
                "job's ranks always do: the profiles come from different runs; each rank is aligned at its first forward")
        for r, o in zip(rank_dicts, offsets):
            if o is not None:
                r["clock_offset_ns"] = o.ns
    how = ["kineto-shared" if kept else "collective-ends" if o is not None else None for o in offsets]
    lone, matched = [i for i, o in enumerate(offsets) if o is None], [i for i, o in enumerate(offsets) if o is not None]
    for i in lone:
        how[i] = _lone(rank_dicts, ns, matched, i)
    _move(rank_dicts, ns)
    clock = {"method": "kineto-shared", "skew_ns": 0, "offsets_ns": {}} if kept else clock_meta(placed)
    said, wide = [] if kept else [note(placed)], scatter(placed)
    said += [f"{'' if said else 'the profiles are kept on the clock they share, '}but {wide}"] if wide else []
    said += [_lone_note(rank_dicts, how, lone)] if lone else []
    caution = CAUTION if lone or wide else ""
    return {**clock, "placed_by": _by(rank_dicts, how)}, (caution + "; ".join(said)) if said else None


def _lone(rank_dicts: list[dict], ns: list[int | None], others: list[int], i: int) -> str:
    """Places rank ``i``, which matches no other rank's allreduce, by the rules of ``_unmatched``
    against the ranks the allreduces placed (``others``): on their clock if its first step is within
    ``SHARED_CLOCK_S`` of theirs and its steps overlap theirs, else its first step with theirs of that
    number (or their earliest first forward). Sets ``ns[i]``; returns how it was placed."""
    its = rank_dicts[i]["iterations"]
    firsts = [rank_dicts[j]["iterations"][0]["forward"]["start_ns"] - ns[j] for j in others]
    mine = its[0]["forward"]["start_ns"]
    if abs(mine - min(firsts)) < SHARED_CLOCK_S * 1e9 and apart(
            [rank_dicts[j] for j in [*others, i]], [ns[j] for j in others] + [0]) is None:
        ns[i] = 0
        return "kineto-shared"
    same = [it["forward"]["start_ns"] - ns[j] for j in others for it in rank_dicts[j]["iterations"]
            if it["iteration"] == its[0]["iteration"]]
    ns[i] = mine - min(same or firsts)
    return "first-forward"


def _lone_note(rank_dicts: list[dict], how: list[str], lone: list[int]) -> str:
    """What became of the ranks that match no other rank's allreduce, in one clause."""
    def ranks(method=None):
        return ranks_text([rank_dicts[i]["rank"] for i in lone if method in (None, how[i])])
    kept, first = ranks("kineto-shared"), ranks("first-forward")
    return (f"rank(s) {ranks()} match no other rank's allreduce (by step, order and size): " + "; ".join(
        ([f"rank(s) {kept} kept on the clock the profiles share (the first step within {SHARED_CLOCK_S:.0f} s "
          "of the others', the steps overlapping theirs)"] if kept else [])
        + ([f"rank(s) {first} aligned at the first forward of its first step, put with the others' same step "
            "(or their first), which hides how long it waited for them"] if first else [])))


def _by(rank_dicts: list[dict], how: list[str]) -> dict:
    """``meta.clock.placed_by``: each rank (a string key) -> the method that placed it."""
    return {str(r["rank"]): h for r, h in zip(rank_dicts, how)}


def _unmatched(rank_dicts: list[dict]) -> tuple[dict, str | None]:
    """No allreduce matches across ranks: one shared clock where the first steps are close and the
    synchronised steps overlap (Note [One job's ranks overlap in every synchronised step] in
    ddpsim/trace/same_run.py), else each rank aligned at its own first forward."""
    firsts = [r["iterations"][0]["forward"]["start_ns"] for r in rank_dicts]
    unmatched = "no allreduce matches across ranks (by step, order and size), and "
    if max(firsts) - min(firsts) >= SHARED_CLOCK_S * 1e9:
        return _first_forward(rank_dicts), (
            f"{CAUTION}{unmatched}the ranks' first steps are {(max(firsts) - min(firsts)) / 1e9:.0f} s apart on the "
            "profiles' clocks: each rank is aligned at its first forward, which hides how long one waited for another")
    found = apart(rank_dicts)
    if found is None:
        _move(rank_dicts, [0] * len(rank_dicts))
        return {"method": "kineto-shared", "skew_ns": 0, "offsets_ns": {},
                "placed_by": _by(rank_dicts, ["kineto-shared"] * len(rank_dicts))}, None
    number, gap = found
    return _first_forward(rank_dicts), (
        f"{CAUTION}{unmatched}ProfilerStep#{number} does not overlap across ranks on the profiles' clocks (one rank's "
        f"starts {gap / 1e6:.1f} ms after another's ends), as one job's ranks always do: the profiles come "
        "from hosts whose clocks differ, or from different runs; each rank is aligned at its first forward")


def _move(rank_dicts: list[dict], offsets: list[int]) -> None:
    """Each rank's times less its offset, then all less the earliest first forward."""
    origin = min(r["iterations"][0]["forward"]["start_ns"] - o for r, o in zip(rank_dicts, offsets))
    for r, o in zip(rank_dicts, offsets):
        shift(r, -(origin + o))


def _first_forward(rank_dicts: list[dict]) -> dict:
    """Each rank moved to start at its own first forward."""
    for r in rank_dicts:
        shift(r, -r["iterations"][0]["forward"]["start_ns"])
    return {"method": "first-forward", "skew_ns": 0, "offsets_ns": {},
            "placed_by": _by(rank_dicts, ["first-forward"] * len(rank_dicts))}


def shift(rank: dict, delta: int) -> None:
    def move(d):
        for k, v in list(d.items()):
            if k.endswith("_ns") and isinstance(v, int):
                d[k] = v + delta
            elif isinstance(v, dict):
                move(v)
            elif isinstance(v, list):
                for x in v:
                    if isinstance(x, dict):
                        move(x)
    for it in rank["iterations"]:
        move(it)


def trace_dict(rank_dicts, params, imports, infos, notes, aligned: dict, paths, sizes: dict, model: str | None) -> dict:
    """The imported trace as the reader takes it; ``imports``: the ranks' ``RankImport``s."""
    info = infos[0] if infos else {}
    gpu = any(imp.gpu for imp in imports)
    clock = "gpu" if gpu else "cpu"
    names = (f"parameter names and shapes: {model}'s, built on the meta device and matched to the "
             "profile's gradient-ready order (Note [The gradient-ready order from a meta backward] in "
             "ddpsim/models/shapes.py)" if model else
             "parameter names: the profile holds shapes only, so parameters are named param<i> with "
             "index i = n-1-(position in the first step's gradient-ready order)")
    notes = [names, f"parameter sizes from: {sizes['params']}; allreduce sizes from: {sizes['buckets']}",
             "DDP options (bucket_cap_mb, find_unused_parameters, ...) are not in a profile: unknown",
             *notes]
    devices = imports[0].p.devices
    return {"format": FORMAT, "version": VERSION, "source": "real", "params": params, "ranks": rank_dicts,
            "meta": {"impl": "torch", "model": "imported profile", "backend": info.get("backend", "unknown"),
                     "world_size": int(info.get("world_size", len(rank_dicts))),
                     "options": {k: None for k in ("bucket_cap_mb", "find_unused_parameters", "static_graph",
                                                   "no_sync_every", "batch_size")},
                     "imported_from": [Path(p).name for p in paths], "source_format": "kineto",
                     "placement": {"device": "cuda" if gpu else "cpu"},
                     "gpu": devices[0].get("name") if devices else None,
                     "clock": aligned,
                     "timebase": _timebase(clock), "import_notes": notes, "sizes": sizes}}


def _timebase(clock: str) -> dict:
    """Which clock each time is on (docs/trace-format.md, meta.timebase)."""
    what = ("gpu: when the GPU did the work (Kineto's GPU timestamps, on the host timeline)"
            if clock == "gpu" else "cpu: when the host ran the op")
    return {"forward": clock, "backward": clock, "optimizer": clock, "grad_ready": clock,
            "allreduce": clock, "source": "kineto", "note": what}
