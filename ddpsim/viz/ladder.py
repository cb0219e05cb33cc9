"""The ladder figure: naive -> overlap -> bucketed -> torch's DDP, measured and simulated.

One horizontal bar per (rung, source): the median iteration time, split into the part
without communication exposed (grey) and the exposed communication after backward (red,
hatched), with the interquartile range of the iteration time as a whisker. Rows are
those of ``ddpsim.ladder.ladder_table``: rung, source ("measured" / "simulated"), n,
iteration_ms and exposed_ms ({median, p25, p75}), overlap.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddpsim.viz import palette as pal

BAR = 0.36  # bar height; measured and simulated bars of a rung sit side by side


def plot_ladder(rows: list[dict], title: str = "") -> Figure:
    """See the module docstring. The first rung is at the top."""
    if not rows:
        raise ValueError("no ladder rows to plot")
    rungs = list(dict.fromkeys(r["rung"] for r in rows))
    fig = Figure(figsize=(8.5, 1.0 + 0.75 * len(rungs)), layout="constrained")
    ax = fig.add_subplot()
    for r in rows:
        y = rungs.index(r["rung"]) + (-BAR / 2 if r["source"] == "measured" else BAR / 2)
        it, ex = r["iteration_ms"], r["exposed_ms"]
        busy = max(it["median"] - ex["median"], 0.0)
        sim = r["source"] == "simulated"
        ax.barh(y, busy, BAR * 0.9, color=pal.BACKWARD if not sim else pal.FORWARD,
                edgecolor=pal.TEXT, lw=0.5, gid=f"ladder:{r['rung']}:{r['source']}:busy")
        ax.barh(y, ex["median"], BAR * 0.9, left=busy, color=pal.EXPOSED, alpha=0.75, hatch="////",
                edgecolor=pal.TEXT, lw=0.5, gid=f"ladder:{r['rung']}:{r['source']}:exposed")
        ax.errorbar(it["median"], y, xerr=[[it["median"] - it["p25"]], [it["p75"] - it["median"]]],
                    fmt="none", ecolor=pal.TEXT, capsize=3, lw=1)
        ax.text(it["p75"] + 0.01 * max(x["iteration_ms"]["p75"] for x in rows), y,
                f"{it['median']:.1f} ms ({r['source']}, overlap {r['overlap']:.0%})",
                va="center", fontsize=8, color=pal.TEXT)
    ax.set_yticks(range(len(rungs)), rungs)
    ax.invert_yaxis()
    ax.set_xlabel("iteration time (ms): median, whisker = interquartile range")
    ax.set_xlim(0, 1.45 * max(r["iteration_ms"]["p75"] for r in rows))
    ax.grid(axis="x", color=pal.GRID)
    ax.set_axisbelow(True)
    ax.legend(handles=[Patch(color=pal.BACKWARD, label="measured: rest of the iteration"),
                       Patch(color=pal.FORWARD, label="simulated: rest of the iteration"),
                       Patch(facecolor=pal.EXPOSED, alpha=0.75, hatch="////", label="exposed communication")],
              loc="lower right", fontsize=8, frameon=False)
    ax.set_title(title or "The ladder: what each idea of DDP buys", loc="left", fontsize=10)
    return fig
