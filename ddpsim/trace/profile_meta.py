"""The imported trace assembled: its ranks on one clock, its meta and what the import could not say.

Kept apart from ``profile_import`` (which reads each rank's steps) so each stays one idea.
"""
from __future__ import annotations

from pathlib import Path

from ddpsim.trace import FORMAT, VERSION
from ddpsim.trace.clock_align import clock_meta, estimate, note, scatter, shared
from ddpsim.trace.same_run import apart

SHARED_CLOCK_S = 600.0  # ranks whose first steps start this close (seconds) share a clock
CAUTION = "caution: "  # an import note that ``ddpsim import`` also prints (the others are on the Timeline)


def align(rank_dicts: list[dict]) -> tuple[dict, str | None]:
    """Puts the ranks on one clock, in place (times from the earliest first forward); returns
    ``meta.clock`` and a note when the clocks differed or could not be trusted. Offsets come from
    the ends of the allreduces every rank ran (Note [A collective ends at once on every rank] in
    ddpsim/trace/clock_align.py): within their own spread the profiles keep the clock they share
    (Kineto uses the host's). Only where no allreduce matches across ranks, and the first steps
    are far apart or a synchronised step does not overlap (Note [One job's ranks overlap in every
    synchronised step] in ddpsim/trace/same_run.py), each rank is aligned at its own first forward."""
    offsets = estimate(rank_dicts)
    if offsets is not None and not shared(offsets):
        moved = [o.ns for o in offsets]
        found = apart(rank_dicts, moved)
        if found is None:
            for r, o in zip(rank_dicts, offsets):
                r["clock_offset_ns"] = o.ns
            _move(rank_dicts, moved)
            wide = scatter(offsets)
            return clock_meta(offsets), note(offsets) if wide is None else f"{CAUTION}{note(offsets)}; but {wide}"
        return _first_forward(rank_dicts), (
            f"{CAUTION}ProfilerStep#{found[0]} does not overlap across ranks even with the clocks aligned on "
            f"the allreduces' ends (one rank's starts {found[1] / 1e6:.1f} ms after another's ends), as one "
            "job's ranks always do: the profiles come from different runs; each rank is aligned at its first forward")
    firsts = [r["iterations"][0]["forward"]["start_ns"] for r in rank_dicts]
    unmatched = "" if offsets is not None else "no allreduce matches across ranks (by step, order and size), and "
    if max(firsts) - min(firsts) >= SHARED_CLOCK_S * 1e9:
        return _first_forward(rank_dicts), (
            f"{CAUTION}{unmatched}the ranks' first steps are {(max(firsts) - min(firsts)) / 1e9:.0f} s apart on the "
            "profiles' clocks: each rank is aligned at its first forward, which hides how long one waited for another")
    found = apart(rank_dicts)
    if found is None:
        _move(rank_dicts, [0] * len(rank_dicts))
        wide = scatter(offsets) if offsets is not None else None
        return {"method": "kineto-shared", "skew_ns": 0, "offsets_ns": {}}, wide and (
            f"{CAUTION}the profiles are kept on the clock they share, but {wide}")
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
    return {"method": "first-forward", "skew_ns": 0, "offsets_ns": {}}


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
