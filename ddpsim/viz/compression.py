"""When compression pays: iteration time against network bandwidth, one line per comm hook.

Rows are ``ddpsim.experiments.compression.iteration_vs_bandwidth``'s (hook, bandwidth_gbps,
iteration_time_s); ``break_even``: hook -> the bandwidth where it stops beating DDP's own
allreduce (a dotted vertical line), None where it never does in the range. SIMULATED.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from ddpsim.viz.sweep import MARKERS, SERIES


def plot_compression(rows: list[dict], break_even: dict | None = None, title: str = "") -> Figure:
    """Iteration time (ms, log) against Gbit/s (log) per hook, with each break-even bandwidth."""
    fig = Figure(figsize=(8, 4.6), layout="constrained")
    ax = fig.add_subplot()
    hooks = list(dict.fromkeys(r["hook"] for r in rows))
    for k, hook in enumerate(hooks):
        mine = [r for r in rows if r["hook"] == hook]
        colour = SERIES[k % len(SERIES)]
        ax.plot([r["bandwidth_gbps"] for r in mine], [r["iteration_time_s"] * 1e3 for r in mine],
                marker=MARKERS[k % len(MARKERS)], color=colour, lw=2.4 if hook == "allreduce" else 1.6,
                label=hook if hook != "allreduce" else "allreduce (DDP's own)", gid=f"compression:{hook}")
        be = (break_even or {}).get(hook)
        if be is not None:
            ax.axvline(be, color=colour, ls=":", lw=1.2)
            ax.annotate(f"{hook} stops paying\nabove {be:.0f} Gbit/s", (be, ax.get_ylim()[1]), fontsize=8.5,
                        color=colour, ha="left", va="top", xytext=(4, -4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("network bandwidth per rank (Gbit/s)")
    ax.set_ylabel("iteration time (ms)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=9, frameon=False)
    ax.set_title(f"{title} (SIMULATED)" if title else "SIMULATED", loc="left", fontsize=11)
    return fig
