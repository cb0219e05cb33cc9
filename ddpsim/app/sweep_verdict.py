"""The What-if page's sweep in words: its best configuration against the chosen one (no Streamlit here).

The rows are ``ddpsim.learn.layout_sweep.sweep_rows``'s (``ddpsim sweep`` runs the same): iteration time
and exposed communication per bucket cap x ordering x find_unused_parameters, and torch's ordering with
the small bucket last (``last_bucket_small``: torch's DDP_SET_LAST_BUCKET_CAP=1), the best marked."""
from __future__ import annotations

from ddpsim.app import beyond
from ddpsim.learn.layout_sweep import SMALL_LAST_ENV, recommend

TIE = ", as fast or faster: nothing to change"  # the choice within 0.05 ms of the sweep's best, or better
FU_KEEPS = " (then torch never rebuilds its buckets: iteration 0's layout, in reverse definition order, stays)"
SMALL_LAST = (f", with **{SMALL_LAST_ENV}** in the ranks' environment (the page's \"Small bucket last\": "
              "torch's rebuild gives its small first bucket to the gradients ready last, so the bucket reduced "
              "last, after the backward, is small)")


def describe_sweep(rows: list[dict], chosen: dict, world_size: int, noise: float | None = None,
                   backend: str | None = None, hook: str | None = None) -> str | None:
    """The sweep's verdict: the best configuration against the chosen one (and ``noise``, the recorded spread).
    ``backend`` and ``hook``: the run's process-group backend and the comm hook the sweep simulates (PowerSGD on
    gloo: ``_powersgd_on_gloo``)."""
    best = recommend(rows)
    if best is None:
        return None
    torch_rows = [r for r in rows if r["order"] == "torch" and not r.get("last_bucket_small")] or rows
    default_rows = [r for r in torch_rows if not r["find_unused_parameters"]] or torch_rows
    every = [r["iteration_time_s"] for r in rows]
    if max(every) - min(every) < 5e-5:  # within 0.05 ms: no winner to name
        what = ("Bucket size, ordering, find_unused_parameters and the small bucket last" if _small(rows)
                else "Bucket size, ordering and find_unused_parameters")
        return (f"{what} make no difference here: all {len(rows)} "
                f"combinations simulate at {best['iteration_time_s'] * 1e3:.1f} ms/iteration at {beyond.ranks(world_size)}.")
    cap = "default (torch's 25 MiB, first bucket 1 MiB)" if best["bucket_cap_mb"] is None else f"{best['bucket_cap_mb']:g}"
    explicit = " (given explicitly, 25 MiB has no 1 MiB first bucket)" if best["bucket_cap_mb"] == 25 else ""
    times, tie = [r["iteration_time_s"] * 1e3 for r in default_rows], chosen["iteration_time_s"] < best["iteration_time_s"] + 5e-5
    return (f"Best simulated: **bucket_cap_mb={cap}**{explicit}, ordering **{best['order']}**, "
            f"find_unused_parameters **{best['find_unused_parameters']}**"
            f"{FU_KEEPS * (best['find_unused_parameters'] and best['order'] == 'torch')}"
            f"{SMALL_LAST * bool(best.get('last_bucket_small'))}: "
            f"{best['iteration_time_s'] * 1e3:.1f} ms/iteration at {beyond.ranks(world_size)} "
            f"(your choice above: {chosen['iteration_time_s'] * 1e3:.1f} ms{TIE * tie}). "
            f"Across bucket sizes with torch's ordering the iteration time ranges "
            f"{min(times):.1f}–{max(times):.1f} ms." + _small_instead(best, rows) + _torch_instead(best, rows)
            + ("" if tie else _within(1 - best["iteration_time_s"] / chosen["iteration_time_s"], noise))
            + _powersgd_on_gloo(best, rows, backend, hook))


def _small(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("last_bucket_small")]


def _small_instead(best: dict, rows: list[dict]) -> str:
    """Where find_unused_parameters wins by keeping a layout: the small bucket last, its direct switch, beside it."""
    if not best["find_unused_parameters"] or not (small := _small(rows)):
        return ""
    r = min(small, key=lambda r: r["iteration_time_s"])
    cap = "the default cap" if r["bucket_cap_mb"] is None else f"bucket_cap_mb={r['bucket_cap_mb']:g}"
    return (f" Without find_unused_parameters (it searches the autograd graph every iteration), "
            f"{SMALL_LAST_ENV} at {cap} simulates at {r['iteration_time_s'] * 1e3:.1f} ms.")


def _torch_instead(best: dict, rows: list[dict]) -> str:
    """Where another ordering wins: it is not a DDP option, and the best row with torch's ordering beside it."""
    if best["order"] == "torch" or not (own := [r for r in rows if r["order"] == "torch"]):
        return ""
    r = min(own, key=lambda r: (r["iteration_time_s"], r["find_unused_parameters"]))
    cap = "the default cap" if r["bucket_cap_mb"] is None else f"bucket_cap_mb={r['bucket_cap_mb']:g}"
    how = (f"find_unused_parameters={r['find_unused_parameters']}"
           + (f" and {SMALL_LAST_ENV}" if r.get("last_bucket_small") else ""))
    return (f" Ordering {best['order']} is not a DDP option: torch fills its buckets in reverse order of "
            "model.parameters(), then rebuilds them in gradient-ready order unless find_unused_parameters=True; "
            f"the row shows what a layout is worth. With torch's ordering the best is {cap}, {how}: "
            f"{r['iteration_time_s'] * 1e3:.1f} ms.")


def _within(gain: float, noise: float | None) -> str:
    """A sentence when the best's gain over the chosen configuration is inside the recorded spread."""
    return "" if noise is None or not 0 < gain < noise else (
        f" Its gain ({gain:.1%}) is inside the recorded run's iteration-to-iteration spread (±{noise:.0%}): "
        "a measurement could not tell the two apart.")


def _powersgd_on_gloo(best: dict, rows: list[dict], backend: str | None, hook: str | None) -> str:
    """A caution where the best row is one torch's PowerSGD aborts on over gloo: several buckets, or
    find_unused_parameters (Note [PowerSGD on gloo with several buckets]). The simulator plays a PowerSGD whose
    collectives go in order on every rank, as NCCL's do."""
    several = best.get("n_buckets", 0) > 1
    if backend != "gloo" or hook != "powersgd" or not (several or best["find_unused_parameters"]):
        return ""
    why = " and ".join([f"{best['n_buckets']} buckets"] * several + ["find_unused_parameters"] * bool(
        best["find_unused_parameters"]))
    return (f" Caution: on gloo, this run's backend, torch's powerSGD_hook aborts (or hangs) with {why}: it issues P's and Q's "
            "allreduces from gloo's callback thread, in an order that differs between ranks (Note [PowerSGD on gloo "
            "with several buckets], ddpsim/minddp/comm_hook.py); the sweep and its figure are what NCCL would run, "
            "and on gloo only one bucket without find_unused_parameters trains" + (
                ", which this model cannot do (it left a parameter unused)" * all(r["find_unused_parameters"] for r in rows))
            + ".")
