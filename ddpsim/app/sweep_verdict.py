"""The What-if page's sweep in words: its best configuration against the chosen one (no Streamlit here).

The rows are ``whatif.sweep_rows``'s: iteration time and exposed communication per bucket cap x
ordering x find_unused_parameters, the best marked."""
from __future__ import annotations

from ddpsim.app import beyond

TIE = ", as fast or faster: nothing to change"  # the choice within 0.05 ms of the sweep's best, or better
FU_KEEPS = " (then torch never rebuilds its buckets: iteration 0's layout, in reverse definition order, stays)"


def describe_sweep(rows: list[dict], chosen: dict, world_size: int, noise: float | None = None) -> str | None:
    """The sweep's verdict: the best configuration against the chosen one (and ``noise``, the recorded spread)."""
    best = recommend(rows)
    if best is None:
        return None
    default_rows = [r for r in rows if r["order"] == "torch" and not r["find_unused_parameters"]] or rows
    every = [r["iteration_time_s"] for r in rows]
    if max(every) - min(every) < 5e-5:  # within 0.05 ms: no winner to name
        return (f"Bucket size, ordering and find_unused_parameters make no difference here: all {len(rows)} "
                f"combinations simulate at {best['iteration_time_s'] * 1e3:.1f} ms/iteration at {beyond.ranks(world_size)}.")
    cap = "default (torch's 25 MiB, first bucket 1 MiB)" if best["bucket_cap_mb"] is None else f"{best['bucket_cap_mb']:g}"
    explicit = " (given explicitly, 25 MiB has no 1 MiB first bucket)" if best["bucket_cap_mb"] == 25 else ""
    times, tie = [r["iteration_time_s"] * 1e3 for r in default_rows], chosen["iteration_time_s"] < best["iteration_time_s"] + 5e-5
    return (f"Best simulated: **bucket_cap_mb={cap}**{explicit}, ordering **{best['order']}**, "
            f"find_unused_parameters **{best['find_unused_parameters']}**{FU_KEEPS * best['find_unused_parameters']}: "
            f"{best['iteration_time_s'] * 1e3:.1f} ms/iteration at {beyond.ranks(world_size)} "
            f"(your choice above: {chosen['iteration_time_s'] * 1e3:.1f} ms{TIE * tie}). "
            f"Across bucket sizes with torch's ordering the iteration time ranges "
            f"{min(times):.1f}–{max(times):.1f} ms." + ("" if tie else _within(1 - best["iteration_time_s"] / chosen["iteration_time_s"], noise)))


def _within(gain: float, noise: float | None) -> str:
    """A sentence when the best's gain over the chosen configuration is inside the recorded spread."""
    return "" if noise is None or not 0 < gain < noise else (
        f" Its gain ({gain:.1%}) is inside the recorded run's iteration-to-iteration spread (±{noise:.0%}): "
        "a measurement could not tell the two apart.")


def recommend(rows: list[dict]) -> dict | None:
    """The best sweep row (lowest iteration time); its cap and order are slider/select values."""
    return next((r for r in rows if r.get("best")), None)
