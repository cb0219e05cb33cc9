"""The imported trace assembled: its ranks on one clock, its meta and what the import could not say.

Kept apart from ``profile_import`` (which reads each rank's steps) so each stays one idea.
"""
from __future__ import annotations

from pathlib import Path

from ddpsim.trace import FORMAT, VERSION
from ddpsim.trace.same_run import apart

SHARED_CLOCK_S = 600.0  # ranks whose first steps start this close (seconds) share a clock
CAUTION = "caution: "  # an import note that ``ddpsim import`` also prints (the others are on the Timeline)


def align(rank_dicts: list[dict]) -> tuple[dict, str, str | None]:
    """Origins per rank, the method, and a caution when the ranks' clocks could not be trusted.
    Profiles of one job usually share a clock (Kineto uses the host's); if their first steps are
    far apart, or a synchronised step does not overlap across ranks, each rank is aligned at its
    own first forward (Note [One job's ranks overlap in every synchronised step] in
    ddpsim/trace/same_run.py)."""
    firsts = {r["rank"]: r["iterations"][0]["forward"]["start_ns"] for r in rank_dicts}
    if max(firsts.values()) - min(firsts.values()) >= SHARED_CLOCK_S * 1e9:
        return firsts, "first-forward", None
    found = apart(rank_dicts)
    if found is None:
        return {r: min(firsts.values()) for r in firsts}, "kineto-shared", None
    number, gap = found
    return firsts, "first-forward", (
        f"{CAUTION}ProfilerStep#{number} does not overlap across ranks on the profiles' clocks (one rank's "
        f"starts {gap / 1e6:.1f} ms after another's ends), as one job's ranks always do: the profiles come "
        "from hosts whose clocks differ, or from different runs; each rank is aligned at its first forward")


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


def trace_dict(rank_dicts, params, imports, infos, notes, method, paths, sizes: dict, model: str | None) -> dict:
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
                     "clock": {"method": method, "skew_ns": 0, "offsets_ns": {}},
                     "timebase": _timebase(clock), "import_notes": notes, "sizes": sizes}}


def _timebase(clock: str) -> dict:
    """Which clock each time is on (docs/trace-format.md, meta.timebase)."""
    what = ("gpu: when the GPU did the work (Kineto's GPU timestamps, on the host timeline)"
            if clock == "gpu" else "cpu: when the host ran the op")
    return {"forward": clock, "backward": clock, "optimizer": clock, "grad_ready": clock,
            "allreduce": clock, "source": "kineto", "note": what}
