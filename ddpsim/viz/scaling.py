"""The scaling figure: one iteration's parts at each world size, stacked.

One bar per world size (evenly spaced: the sizes run from 1 to 100,000), split into compute (with
the communication hidden under it, grey as the timeline's backward), the communication left exposed
(the timeline's hatched red) and waiting for the slowest rank (orange). Above each bar, the share of
its 1-rank throughput each rank keeps (``efficiency``); under a size, the NCCL algorithm and protocol
of the largest bucket's allreduce where there is one. The what-if's own world size is outlined. Times
are in milliseconds, in seconds where the tallest bar reaches ten (a flat ring at 100,000 ranks), on a
logarithmic axis where the tallest bar is ``LOG_FROM`` times the shortest or more.
Rows are those of ``ddpsim.app.scaling.rows``: world_size, iteration_time_s, compute_s,
exposed_comm_s, waiting_s, and optionally efficiency and nccl.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddpsim.viz import palette as pal

WAITING = "#E69F00"  # Okabe-Ito orange: waiting for stragglers
MIN_SLOTS = 8  # bar slots the axis holds at the least
LOG_FROM = 30.0  # tallest bar over shortest from which the time axis is logarithmic
SECONDS_FROM = 10.0  # s: an iteration this long or longer is written in seconds (figures and the app's words)
PARTS = (("compute_s", "compute (communication hidden under it)", {"color": pal.BACKWARD}),
         ("exposed_comm_s", "exposed communication", {"color": "white", "hatch": "////", "edgecolor": pal.EXPOSED}),
         ("waiting_s", "waiting for stragglers", {"color": WAITING}))


def time_unit(longest_s: float) -> tuple[float, str]:
    """(scale from seconds, unit) of a figure's times: ms, or s where the longest is ``SECONDS_FROM`` or more (a
    CPU run at 100,000 ranks: an axis in ms read "1e6" above it)."""
    return (1.0, "s") if longest_s >= SECONDS_FROM else (1e3, "ms")


def size_label(n: int) -> str:
    """1, 512, 4k, 16k, 100k: a world size short enough to sit under a bar."""
    return f"{n // 1000}k" if n >= 4000 and n % 1000 == 0 else f"{n / 1024:g}k" if n >= 4096 and n % 1024 == 0 else str(n)


def plot_scaling(rows: list[dict], chosen: int | None = None, title: str = "") -> Figure:
    """The stacked bars (module docstring); ``chosen``: the world size to outline."""
    if not rows:
        raise ValueError("no world sizes to plot")
    fig = Figure(figsize=(10, 4.0), layout="constrained")
    ax = fig.subplots()
    xs = range(len(rows))
    bottom = [0.0] * len(rows)
    scale, unit = time_unit(max(r["iteration_time_s"] for r in rows))
    for key, label, style in PARTS:
        ms = [r[key] * scale for r in rows]
        ax.bar(xs, ms, bottom=bottom, width=0.7, label=label, linewidth=0.6, zorder=2, gid=f"scaling_{key}",
               **{"edgecolor": pal.TEXT, **style})
        bottom = [b + m for b, m in zip(bottom, ms)]
    top, log = max(bottom), max(bottom) > LOG_FROM * min(bottom)
    if log:  # a flat ring at 100,000 ranks next to a step of milliseconds: on a linear axis those bars vanished
        ax.set_yscale("log")
    for x, (r, height) in enumerate(zip(rows, bottom)):
        if r.get("efficiency") is not None:
            ax.text(x, height * 1.06 if log else height + top * 0.01, share(r["efficiency"]), ha="center",
                    va="bottom", fontsize=8.5, color=pal.TEXT)
        if r["world_size"] == chosen:
            ax.bar(x, height, width=0.78, fill=False, edgecolor=pal.TEXT, linewidth=2.0, zorder=3, gid="scaling_chosen")
    ax.set_xticks(list(xs), [_tick(r) for r in rows], fontsize=8)
    for tick, r in zip(ax.get_xticklabels(), rows):
        if r["world_size"] == chosen:
            tick.set_fontweight("bold")
    pad = max(0.0, (MIN_SLOTS - len(rows)) / 2)  # a few sizes: bars as wide as among many, centred
    ax.set_xlim(-0.5 - pad, len(rows) - 0.5 + pad)
    ax.set_ylim(*((min(bottom) / 2, top * 2.5) if log else (0, top * 1.12)))
    ax.set_xlabel("world size (ranks)" + ("; under it, NCCL's algorithm and protocol for the largest bucket"
                                         if any(r.get("nccl") for r in rows) else "")
                  + ("\nabove a bar: each rank's share of its 1-rank throughput (efficiency)"
                     if any(r.get("efficiency") is not None for r in rows) else ""), fontsize=10)
    ax.set_ylabel(f"iteration time ({unit}{', log scale' if log else ''})", fontsize=10)
    ax.grid(axis="y", color=pal.GRID, zorder=0.5)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    handles = [Patch(facecolor=s.get("color"), hatch=s.get("hatch"), edgecolor=s.get("edgecolor", pal.TEXT), label=label)
               for _, label, s in PARTS]
    if any(r["world_size"] == chosen for r in rows):  # outlined only where it is one of the bars
        handles.append(Patch(facecolor="none", edgecolor=pal.TEXT, linewidth=2.0, label="the what-if's world size"))
    fig.legend(handles=handles, loc="outside lower center", fontsize=8.5, frameon=False, ncols=4)  # under the axis
    if title:  # the figure's, so that it sits above the legend (an axes title sat under it)
        fig.suptitle(title, x=0.01, ha="left", fontsize=11)
    return fig


def share(efficiency: float) -> str:
    """An efficiency above its bar: whole percent, one decimal under 10% ("0%" stood for 0.2%)."""
    return f"{efficiency:.0%}" if efficiency >= 0.095 else f"{efficiency:.1%}" if efficiency >= 0.001 else "<0.1%"


def _tick(row: dict) -> str:
    nccl = row.get("nccl") or ""
    return size_label(row["world_size"]) + ("\n" + nccl.replace("/", "\n") if nccl else "")
