"""The What-if page's sweep in words: its best configuration against the chosen one (no Streamlit here).

The rows are ``ddpsim.learn.layout_sweep.sweep_rows``'s (``ddpsim sweep`` runs the same): iteration time
and exposed communication per bucket cap x ordering x find_unused_parameters, and torch's ordering with
the small bucket last (``last_bucket_small``: torch's DDP_SET_LAST_BUCKET_CAP=1), the best marked."""
from __future__ import annotations

from ddpsim.app import beyond
from ddpsim.app.units import duration, duration_range
from ddpsim.learn.layout_sweep import (NOT_DDP, NOT_DDP_ORDERS, SMALL_LAST_ENV, cap_text, no_winner,
                                       powersgd_on_gloo, recommend, torch_best)

TIE = ", as fast or faster: nothing to change"  # the choice within 0.05 ms of the sweep's best, or better
FU_KEEPS = " (then torch never rebuilds its buckets: iteration 0's layout, in reverse definition order, stays)"
SMALL_LAST = (f", with **{SMALL_LAST_ENV}** in the ranks' environment (the page's \"Small bucket last\": "
              "torch's rebuild gives its small first bucket to the gradients ready last, so the bucket reduced "
              "last, after the backward, is small)")


def describe_sweep(rows: list[dict], chosen: dict, world_size: int, noise: float | None = None,
                   backend: str | None = None, hook: str | None = None) -> str | None:
    """The sweep's verdict: the best configuration against the chosen one (and ``noise``, the recorded spread).
    ``backend`` and ``hook``: the run's process-group backend and the comm hook the sweep simulates (PowerSGD on
    gloo: ``ddpsim.learn.layout_sweep.powersgd_on_gloo``)."""
    best = recommend(rows)
    if best is None:
        return None
    torch_rows = [r for r in rows if r["order"] == "torch" and not r.get("last_bucket_small")] or rows
    default_rows = [r for r in torch_rows if not r["find_unused_parameters"]] or torch_rows
    if no_winner(rows):  # within 0.05 ms: no winner to name
        what = ("Bucket size, ordering, find_unused_parameters and the small bucket last" if _small(rows)
                else "Bucket size, ordering and find_unused_parameters")
        return (f"{what} make no difference here: all {len(rows)} "
                f"combinations simulate at {duration(best['iteration_time_s'])}/iteration at {beyond.ranks(world_size)}.")
    cap = cap_text(best["bucket_cap_mb"])
    explicit = " (given explicitly, 25 MiB has no 1 MiB first bucket)" if best["bucket_cap_mb"] == 25 else ""
    times, tie = [r["iteration_time_s"] for r in default_rows], chosen["iteration_time_s"] < best["iteration_time_s"] + 5e-5
    return (f"Best simulated: **bucket_cap_mb={cap}**{explicit}, ordering **{best['order']}**, "
            f"find_unused_parameters **{best['find_unused_parameters']}**"
            f"{FU_KEEPS * (best['find_unused_parameters'] and best['order'] == 'torch')}"
            f"{SMALL_LAST * bool(best.get('last_bucket_small'))}: "
            f"{duration(best['iteration_time_s'])}/iteration at {beyond.ranks(world_size)} "
            f"(your choice above: {duration(chosen['iteration_time_s'])}{TIE * tie}). "
            f"Across bucket sizes with torch's ordering the iteration time ranges "
            f"{duration_range(min(times), max(times))}." + _small_instead(best, rows) + _torch_instead(best, rows)
            + ("" if tie else _within(1 - best["iteration_time_s"] / chosen["iteration_time_s"], noise))
            + ((" " + caution) if (caution := powersgd_on_gloo(best, rows, backend, hook)) else ""))


def _small(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r.get("last_bucket_small")]


def _small_instead(best: dict, rows: list[dict]) -> str:
    """Where find_unused_parameters wins by keeping a layout: the small bucket last, its direct switch, beside it."""
    if not best["find_unused_parameters"] or not (small := _small(rows)):
        return ""
    r = min(small, key=lambda r: r["iteration_time_s"])
    return (f" Without find_unused_parameters (it searches the autograd graph every iteration), "
            f"{SMALL_LAST_ENV} at {_cap_words(r)} simulates at {duration(r['iteration_time_s'])}.")


def _torch_instead(best: dict, rows: list[dict]) -> str:
    """Where another ordering wins: it is not a DDP option, and the best row with torch's ordering beside it."""
    if best["order"] not in NOT_DDP_ORDERS or (r := torch_best(rows)) is None:
        return ""
    how = (f"find_unused_parameters={r['find_unused_parameters']}"
           + (f" and {SMALL_LAST_ENV}" if r.get("last_bucket_small") else ""))
    return (f" Ordering {best['order']} {NOT_DDP}. With torch's ordering the best is {_cap_words(r)}, {how}: "
            f"{duration(r['iteration_time_s'])}.")


def _cap_words(row: dict) -> str:
    """A row's cap inside a sentence: "the default cap" or "bucket_cap_mb=5"."""
    return "the default cap" if row["bucket_cap_mb"] is None else f"bucket_cap_mb={row['bucket_cap_mb']:g}"


def _within(gain: float, noise: float | None) -> str:
    """A sentence when the best's gain over the chosen configuration is inside the recorded spread."""
    return "" if noise is None or not 0 < gain < noise else (
        f" Its gain ({gain:.1%}) is inside the recorded run's iteration-to-iteration spread (±{noise:.0%}): "
        "a measurement could not tell the two apart.")
