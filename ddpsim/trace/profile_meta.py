"""The imported trace assembled: its ranks on one clock, its meta and what the import could not say.

Kept apart from ``profile_import`` (which reads each rank's steps) so each stays one idea.
"""
from __future__ import annotations

from pathlib import Path

from ddpsim.trace import FORMAT, VERSION
from ddpsim.trace.clock_align import clock_meta, note, scatter, shared
from ddpsim.trace.clock_groups import estimate
from ddpsim.trace.clock_place import one_clock, place_all, window
from ddpsim.trace.same_run import apart

CAUTION = "caution: "  # an import note that ``ddpsim import`` also prints (the others are on the Timeline)


def align(rank_dicts: list[dict]) -> tuple[dict, str | None]:
    """Puts the ranks on one clock, in place (times from the earliest first forward); returns
    ``meta.clock`` and a note when the clocks differed or could not be trusted. Offsets come from
    the ends of the allreduces the ranks ran, within each group of ranks that share them (Note
    [Ranks join a clock through the allreduces they share] in ddpsim/trace/clock_groups.py): within
    their own spread the profiles keep the clock they share (Kineto uses the host's). The other
    groups and the ranks that share no allreduce are placed beside the largest group by their
    steps (Note [A rank no allreduce ties is placed by its steps] in ddpsim/trace/clock_place.py);
    where no allreduce matches, every rank is (``_unmatched``)."""
    groups = estimate(rank_dicts)
    if not groups:
        return _unmatched(rank_dicts)
    main, placed = groups[0], list(groups[0].values())
    kept = shared(placed)
    if not kept and (found := apart([rank_dicts[i] for i in main], [o.ns for o in placed])) is not None:
        return _first_forward(rank_dicts), (
            f"{CAUTION}ProfilerStep#{found[0]} does not overlap across ranks even with the clocks aligned on "
            f"the allreduces' ends (one rank's starts {found[1] / 1e6:.1f} ms after another's ends), as one "
            "job's ranks always do: the profiles come from different runs; each rank is aligned at its first forward")
    ns: list[int | None] = [None] * len(rank_dicts)
    for g in groups:
        moved = not (kept if g is main else shared(list(g.values())))
        for i, o in g.items():
            ns[i] = rank_dicts[i]["clock_offset_ns"] = o.ns if moved else 0
    lone = [[i] for i, o in enumerate(ns) if o is None]
    units = [list(g) for g in groups[1:]] + lone  # placed by their steps: they share no allreduce with main
    why = ([None if shared(list(g.values())) else "own" for g in groups[1:]] + [None] * len(lone) if kept
           else ["differ"] * len(units))  # what keeps them off the profiles' clock whatever their steps
    how, shifts, placing = place_all(rank_dicts, ns, list(main), units, why) if units else ({}, {}, None)
    how.update({i: "kineto-shared" if kept else "collective-ends" for i in main})
    _move(rank_dicts, ns)
    clock = {"method": "kineto-shared", "skew_ns": 0, "offsets_ns": {}} if kept else clock_meta(placed)
    said, wide = [] if kept else [note(placed)], scatter([o for g in groups for o in g.values()])
    said += [f"{'' if said else 'the profiles are kept on the clock they share, '}but {wide}"] if wide else []
    said += [placing] if placing else []
    caution = CAUTION if placing or wide else ""
    clock["placed_by"] = _by(rank_dicts, [how[i] for i in range(len(rank_dicts))])
    if shifts:
        clock["placed_ns"] = {str(rank_dicts[i]["rank"]): ns for i, ns in sorted(shifts.items())}
    if len(groups) > 1:
        clock["groups"] = [_group(rank_dicts, g) for g in groups[1:]]
    return clock, (caution + "; ".join(said)) if said else None


def _group(rank_dicts: list[dict], group: dict) -> dict:
    """``meta.clock.groups``' entry of a group that shares allreduces only among itself."""
    offsets = list(group.values())
    return {"ranks": sorted(rank_dicts[i]["rank"] for i in group), "reference": offsets[0].ref,
            "skew_ns": max(o.spread_ns for o in offsets),
            "offsets_ns": {} if shared(offsets) else {str(o.rank): o.ns for o in offsets}}


def _by(rank_dicts: list[dict], how: list[str]) -> dict:
    """``meta.clock.placed_by``: each rank (a string key) -> the method that placed it."""
    return {str(r["rank"]): h for r, h in zip(rank_dicts, how)}


def _unmatched(rank_dicts: list[dict]) -> tuple[dict, str | None]:
    """No allreduce matches across ranks: one shared clock where the first steps are close and the
    synchronised steps overlap (``one_clock``), else each rank aligned at its first forward."""
    found = one_clock(window(rank_dicts, {i: 0 for i in range(len(rank_dicts))}))
    if found is None:
        _move(rank_dicts, [0] * len(rank_dicts))
        return {"method": "kineto-shared", "skew_ns": 0, "offsets_ns": {},
                "placed_by": _by(rank_dicts, ["kineto-shared"] * len(rank_dicts))}, None
    return _first_forward(rank_dicts), (
        f"{CAUTION}no allreduce matches across ranks (by step, order and size), and {found[1]}: the profiles "
        "come from hosts whose clocks differ, or from different runs; each rank is aligned at its first forward, "
        "which hides how long one waited for another")


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
