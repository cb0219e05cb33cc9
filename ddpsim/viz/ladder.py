"""The ladder figure: naive -> overlap -> bucketed -> torch's DDP, measured and simulated.

One horizontal bar per (rung, source): the median iteration time, split into the part
without communication exposed (grey) and the exposed communication after backward (red,
hatched), with the interquartile range of the iteration time as a whisker. Rows are
those of ``ddpsim.experiments.ladder.ladder_table``: rung, source ("measured", "replayed", "predicted"...), n,
iteration_ms and exposed_ms ({median, p25, p75}), overlap.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddpsim.viz import palette as pal

SHADES = {"measured": pal.BACKWARD, "simulated": pal.FORWARD, "replayed": pal.FORWARD,
          "predicted": "#F4F4F4"}  # the part of the iteration without exposed communication


def plot_ladder(rows: list[dict], title: str = "") -> Figure:
    """See the module docstring. The first rung is at the top; a rung's sources side by side."""
    if not rows:
        raise ValueError("no ladder rows to plot")
    rungs = list(dict.fromkeys(r["rung"] for r in rows))
    sources = list(dict.fromkeys(r["source"] for r in rows))
    bar = 0.8 / len(sources)
    top = max(r["iteration_ms"]["p75"] for r in rows)
    fig = Figure(figsize=(8.5, 1.0 + 0.35 * len(rungs) * (len(sources) + 0.5)), layout="constrained")
    ax = fig.add_subplot()
    for r in rows:
        y = rungs.index(r["rung"]) - 0.4 + bar * (sources.index(r["source"]) + 0.5)
        it, ex = r["iteration_ms"], r["exposed_ms"]
        busy = max(it["median"] - ex["median"], 0.0)
        gid = f"ladder:{r['rung']}:{r['source']}"
        ax.barh(y, busy, bar * 0.9, color=SHADES.get(r["source"], pal.FORWARD), edgecolor=pal.TEXT, lw=0.5,
                gid=gid + ":busy")
        ax.barh(y, ex["median"], bar * 0.9, left=busy, color=pal.EXPOSED, alpha=0.75, hatch="////",
                edgecolor=pal.TEXT, lw=0.5, gid=gid + ":exposed")
        ax.errorbar(it["median"], y, xerr=[[it["median"] - it["p25"]], [it["p75"] - it["median"]]],
                    fmt="none", ecolor=pal.TEXT, capsize=3, lw=1)
        ax.text(it["p75"] + 0.01 * top, y, f"{it['median']:.1f} ms {r['source']}, overlap {r['overlap']:.0%}",
                va="center", fontsize=7.5, color=pal.TEXT)
    ax.set_yticks(range(len(rungs)), rungs)
    ax.invert_yaxis()
    ax.set_xlabel("iteration time (ms): median, whisker = interquartile range")
    ax.set_xlim(0, 1.5 * top)
    ax.grid(axis="x", color=pal.GRID)
    ax.set_axisbelow(True)
    handles = [Patch(facecolor=SHADES.get(s, pal.FORWARD), edgecolor=pal.TEXT, lw=0.5,
                     label=f"{s}: rest of the iteration") for s in sources]
    handles.append(Patch(facecolor=pal.EXPOSED, alpha=0.75, hatch="////", label="exposed communication"))
    ax.legend(handles=handles, loc="lower right", fontsize=8, frameon=False)
    ax.set_title(title or "The ladder: what each idea of DDP buys", loc="left", fontsize=10)
    return fig
