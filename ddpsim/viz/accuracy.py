"""The accuracy figure: predicted against measured for every validation run.

Each check writes its results as JSON (``validate --grid/--extrapolate --out X`` writes X.json,
``gpucheck --json F``, ``published --json F`` with one section per kind of source);
``accuracy_points`` reads any of them as one (measured, predicted) pair per run in the check's own
unit: milliseconds per iteration (the GPU check: per backward, which is what it measures), or a
published figure in its published unit (seconds per iteration as ms, a throughput, a bus bandwidth),
so that a check's median |error| is the one its command prints; ``plot_accuracy`` draws them on log axes
against the diagonal, with the +-10% band, one colour and marker per check. ``docs/accuracy_figure.py`` draws
docs/accuracy.png from the results kept in docs/data/.
"""
from __future__ import annotations

import math
import statistics

from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ddpsim.viz import palette as pal

MARKERS = "os^Dv<>"
BAND = 0.10  # the shaded band: predicted within +-10% of measured


def accuracy_points(result: dict, section: str | None = None) -> list[tuple[float, float]]:
    """(measured, predicted) per run of one check's result file, or of its ``section`` (see the module
    docstring); runs that failed (no number) are left out."""
    if section is not None:
        if not isinstance(result.get(section), dict):
            raise ValueError(f"the result file has no section {section!r}")
        result = result[section]
    rows = result.get("rows")
    if not isinstance(rows, list):
        raise ValueError("a result file holds {'rows': [...]} (validate --out, gpucheck --json, published --json)")
    out = []
    for r in rows:
        if "predicted_ms" in r:  # validate --grid / --extrapolate (experiments/table.py)
            pair = (r["measured_ms"], r["predicted_ms"])
        elif "backward_simulated_ms" in r:  # gpucheck
            pair = (r["backward_measured_ms"], r["backward_simulated_ms"])
        elif "published" in r:  # published: a prediction, in the unit it was published in
            if r.get("role") != "prediction":
                continue
            scale = 1e3 if r.get("unit") == "s" else 1.0  # seconds per iteration drawn as ms
            pair = (scale * r["published"], scale * r["predicted"])
        else:
            raise ValueError(f"a result row of no known check: {sorted(r)[:6]}")
        if all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in pair):
            out.append(pair)
    return out


def error_summary(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(median, max) |predicted - measured| / measured, in percent."""
    errs = [abs(p - m) / m * 100 for m, p in points]
    return statistics.median(errs), max(errs)


def plot_accuracy(checks: list[tuple[str, list[tuple[float, float]]]], title: str = "") -> Figure:
    """One scatter of (measured, predicted) per check, labelled with its runs and errors."""
    checks = [(label, pts) for label, pts in checks if pts]
    if not checks:
        raise ValueError("no validation runs to plot")
    values = [v for _, pts in checks for pair in pts for v in pair]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    fig = Figure(figsize=(7.5, 6.2), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    line = [lo, hi]
    ax.fill_between(line, [v * (1 - BAND) for v in line], [v * (1 + BAND) for v in line], color=pal.GRID,
                    label=f"within ±{BAND:.0%}", gid="accuracy:band")
    ax.plot(line, line, color=pal.TEXT, lw=0.8, label="predicted = measured", gid="accuracy:diagonal")
    for i, (label, pts) in enumerate(checks):
        med, worst = error_summary(pts)
        ax.scatter([m for m, _ in pts], [p for _, p in pts], s=22, marker=MARKERS[i % len(MARKERS)],
                   color=pal.OKABE_ITO[i % len(pal.OKABE_ITO)], edgecolor=pal.TEXT, linewidth=0.4, zorder=3,
                   label=f"{label}: {len(pts)} runs, median |error| {med:.1f}%, max {worst:.1f}%",
                   gid=f"accuracy:check:{i}")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    subs = (1.0, 2.0, 5.0) if hi / lo < 1e4 else (1.0,)  # over many decades, the powers of ten alone
    for axis in (ax.xaxis, ax.yaxis):  # 10, 20, 50, 100 ... ms, not 10^1
        axis.set_major_locator(LogLocator(subs=subs))
        axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(NullFormatter())
    ax.set_aspect("equal")
    ax.set_xlabel("measured: ms per iteration (GPU check: per backward); published throughput or bus GB/s")
    ax.set_ylabel("predicted by ddpsim (the same unit)")
    ax.grid(which="both", color=pal.GRID, lw=0.5)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", fontsize=7.5, frameon=False)
    n = sum(len(pts) for _, pts in checks)
    ax.set_title(title or f"Predicted against measured: {n} validation runs", loc="left", fontsize=10)
    return fig
