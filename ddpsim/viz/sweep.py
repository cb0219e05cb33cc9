"""The sweep curve: iteration time and exposed communication against bucket size.

One line per (ordering, find_unused_parameters): the ordering sets the colour and
marker, find_unused_parameters on is dashed. Rows with ``last_bucket_small`` (torch's
ordering with DDP_SET_LAST_BUCKET_CAP=1) are a series of their own, "torch, small last",
with its own colour. torch's ordering is drawn on top and
thicker: other orderings often give the same times and would hide it. The best row (lowest iteration time)
is a star; the configuration being looked at is a black ring. Rows are those of
``ddpsim.sim.sweep.sweep``: bucket_cap_mb, order, find_unused_parameters,
iteration_time_s, exposed_comm_s, and optionally best and last_bucket_small. A row whose bucket_cap_mb is
None is torch's default cap (25 MiB with a 1 MiB first bucket); it is drawn as a
dotted horizontal line (find_unused off), and placed at 25 MiB when it is the best.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ddpsim.learn.layout_sweep import best_row  # the sweep's own rule: the star is its best
from ddpsim.viz import palette as pal
from ddpsim.viz.scaling import time_unit

MARKERS = ("o", "s", "^", "D", "v", "P")
# Series colours: Okabe-Ito too, but starting at blue so they differ from bucket 0's orange.
SERIES = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00")


DEFAULT_CAP_MB = 25.0  # where a default-cap row is placed on the x axis
SMALL_LAST = "torch, small last"  # the series of torch's ordering with DDP_SET_LAST_BUCKET_CAP=1


def _series(row: dict) -> str:
    """The row's series (colour): its ordering, or SMALL_LAST."""
    return SMALL_LAST if row.get("last_bucket_small") else row.get("order", "torch")


def _gid(series: str) -> str:
    return "small_last" if series == SMALL_LAST else series


def _x(row: dict) -> float:
    return DEFAULT_CAP_MB if row["bucket_cap_mb"] is None else row["bucket_cap_mb"]


def plot_sweep(rows: list[dict], current: dict | None = None, title: str = "") -> Figure:
    """Two panels sharing the bucket-size axis (log scale); see the module docstring.

    current: a row-like dict (bucket_cap_mb, iteration_time_s, exposed_comm_s) to ring.
    """
    if not rows:
        raise ValueError("no sweep rows to plot")
    scale, unit = time_unit(max(r["iteration_time_s"] for r in rows))
    fig = Figure(figsize=(10, 4.2), layout="constrained")
    ax_t, ax_e = fig.subplots(1, 2, sharex=True)
    panels = ((ax_t, "iteration_time_s"), (ax_e, "exposed_comm_s"))
    orders = list(dict.fromkeys(_series(r) for r in rows))
    fus = list(dict.fromkeys(bool(r.get("find_unused_parameters", False)) for r in rows))
    for k, order in enumerate(orders):
        for fu in fus:
            _draw_series(panels, [r for r in rows if _series(r) == order
                                  and bool(r.get("find_unused_parameters", False)) == fu], k, order, fu,
                         level=not fu or fus == [True], scale=scale)  # find_unused kept on: its default cap: the level
    best = best_row(rows)
    if best["bucket_cap_mb"] is None and best.get("find_unused_parameters") and False in fus:  # or the star floats
        color = SERIES[orders.index(_series(best)) % len(SERIES)]
        for ax, key in panels:
            ax.axhline(best[key] * scale, color=color, ls=":", lw=1.3, gid="default:best")
    for ax, key in panels:
        ax.plot(_x(best), best[key] * scale, marker="*", ms=18, color="#F0E442",
                mec=pal.TEXT, mew=1.2, ls="none", zorder=5, gid="best")
        if current and current.get("bucket_cap_mb") is not None:
            ax.plot(current["bucket_cap_mb"], current[key] * scale, marker="o", ms=13, mfc="none",
                    mec=pal.TEXT, mew=2, ls="none", zorder=6, gid="current")
        ax.set_xscale("log")
        ax.set_xlabel("bucket cap (MiB, log scale)")
        ax.grid(color=pal.GRID, which="both")
        ax.set_axisbelow(True)
        top = max([*(r[key] for r in rows), *([current[key]] if current else [])]) * scale  # best is a row
        ax.set_ylim(0, top * 1.08 or 1.0)  # headroom: the highest markers are not cut by the frame
    ax_t.set_ylabel(f"iteration time ({unit})")
    ax_e.set_ylabel(f"exposed communication ({unit})")
    cap = "torch default (25 MiB, 1 MiB first)" if best["bucket_cap_mb"] is None else f"{best['bucket_cap_mb']:g} MiB"
    side = _label_side(best, rows)
    ax_t.annotate(f"best: {cap}, {best.get('order', 'torch')}"
                  f"{', find_unused' if best.get('find_unused_parameters') else ''}"
                  f"{', small bucket last' if best.get('last_bucket_small') else ''}\n"
                  f"{best['iteration_time_s'] * scale:,.1f} {unit}/iteration",
                  (_x(best), best["iteration_time_s"] * scale), xytext=(side[1], _label_dy(ax_t, best, scale)),
                  textcoords="offset points", ha=side[0], fontsize=8.5, color=pal.TEXT,
                  bbox={"boxstyle": "round", "fc": "white", "ec": pal.GRID})
    fig.suptitle(title or "what bucket size is best?", x=0.01, ha="left", fontsize=11.5)
    handles = _legend_handles(rows, orders, fus, current)
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)), fontsize=9,
               frameon=False)
    return fig


def _label_dy(ax, best: dict, scale: float) -> float:
    """The best label's offset in points: under the star, or over it where the star sits in the lowest third of
    the panel (under it, the label ran onto the axis's tick labels)."""
    return -34 if best["iteration_time_s"] * scale > ax.get_ylim()[1] * 0.35 else 14


def _label_side(best: dict, rows: list[dict]) -> tuple[str, float]:
    """(alignment, x offset in points) of the best label: centred under the star, but never over the
    axis's ticks at either end, where it starts just beside the star instead."""
    xs = [_x(r) for r in rows]
    if _x(best) == min(xs) < max(xs):
        return "left", -8
    if _x(best) == max(xs) > min(xs):
        return "right", 8
    return "center", 0


def _draw_series(panels, mine: list[dict], k: int, order: str, fu: bool, level: bool, scale: float = 1e3) -> None:
    """One (ordering, find_unused) line in both panels, and (``level``) its default-cap row as a dotted level."""
    pts = sorted(((r["bucket_cap_mb"], r) for r in mine if r["bucket_cap_mb"] is not None),
                 key=lambda p: p[0])
    default = next((r for r in mine if r["bucket_cap_mb"] is None), None)
    color = SERIES[k % len(SERIES)]
    for ax, key in panels:
        if pts:
            ax.plot([x for x, _ in pts], [r[key] * scale for _, r in pts], color=color,
                    marker=MARKERS[k % len(MARKERS)], ms=6 if order == "torch" else 5,
                    ls="--" if fu else "-", lw=2.4 if order == "torch" else 1.4,
                    zorder=4.5 if order == SMALL_LAST else 4 if order == "torch" else 3 - k * 0.1,  # torch's line on
                    # top, the small-last one over it (thinner): it runs along find_unused's, the same buckets
                    alpha=1 if order == "torch" else 0.85,
                    gid=f"series:{_gid(order)}:{'fu' if fu else 'nofu'}")
        if default is not None and level:
            ax.axhline(default[key] * scale, color=color, ls=":", lw=1.3, gid=f"default:{_gid(order)}")


def _legend_handles(rows: list[dict], orders: list[str], fus: list[bool], current) -> list:
    handles = [Line2D([], [], color=SERIES[k % len(SERIES)], marker=MARKERS[k % len(MARKERS)],
                      label="order: torch, DDP_SET_LAST_BUCKET_CAP=1" if o == SMALL_LAST else f"order: {o}")
               for k, o in enumerate(orders)]
    if fus != [False]:  # a line style per find_unused_parameters value the sweep has rows for
        handles += [Line2D([], [], color=pal.TEXT, ls="--" if fu else "-", label=f"find_unused {'on' if fu else 'off'}")
                    for fu in sorted(fus)]
    if any(r["bucket_cap_mb"] is None for r in rows):
        handles.append(Line2D([], [], color=pal.TEXT, ls=":", label="default cap (25 MiB, 1 MiB first)"))
    handles.append(Line2D([], [], marker="*", ms=12, color="#F0E442", mec=pal.TEXT, ls="none",
                          label="best"))
    if current:
        handles.append(Line2D([], [], marker="o", ms=10, mfc="none", mec=pal.TEXT, mew=2, ls="none",
                              label="your choice"))
    return handles
