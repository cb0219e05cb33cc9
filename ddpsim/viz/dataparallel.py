"""DataParallel beside DDP: both SIMULATED iterations as device timelines, and time against N.

``plot_dataparallel(comparison)`` draws a ``ddpsim.sim.dp_compare.Comparison``: DataParallel's
iteration, one row per device (its forward slices alternate between the Python that holds the
GIL and the kernels); DDP's iteration on the same time axis, one row per rank with its allreduces
on a row beneath; and, where the comparison has one, the iteration time against the number of
devices. Every panel says SIMULATED.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddpsim.viz.palette import BACKWARD, BUFFERS, FORWARD, GRID, OKABE_ITO, OPTIMIZER, TEXT

DDP_FORWARD = "#E9CFDF"  # a DDP rank's forward: Python and kernels in its own process, no GIL to share

COLORS = {  # phase name -> colour; copies in Okabe-Ito, compute in the timeline's greys
    "scatter": OKABE_ITO[1], "scatter grad": OKABE_ITO[1], "replicate": OKABE_ITO[0],
    "replicate (Python, GIL)": OKABE_ITO[3], "forward (Python, GIL)": OKABE_ITO[3],
    "forward (kernels)": FORWARD, "forward": DDP_FORWARD, "gather": OKABE_ITO[4], "loss": OKABE_ITO[6],
    "backward": BACKWARD, "reduce (copy to device 0)": OKABE_ITO[5], "reduce (add)": OKABE_ITO[5],
    "optimizer": OPTIMIZER, "allreduce": OKABE_ITO[2], "buffer broadcast": BUFFERS,
}
LEGEND = {  # legend text -> the phase names it stands for
    "scatter / scatter grad": ("scatter", "scatter grad"), "replicate (copies)": ("replicate",),
    "Python holding the GIL": ("forward (Python, GIL)", "replicate (Python, GIL)"),
    "forward kernels": ("forward (kernels)",), "DDP forward (its own GIL)": ("forward",),
    "gather": ("gather",), "loss": ("loss",), "backward": ("backward",),
    "reduce to device 0": ("reduce (copy to device 0)", "reduce (add)"), "optimizer": ("optimizer",),
    "DDP allreduce (a bucket)": ("allreduce",), "DDP buffer broadcast": ("buffer broadcast",),
}


def merged(phases) -> list[tuple[str, float, float]]:
    """(name, start, end) with back-to-back spans of one name joined (the forward's many slices)."""
    out: list[list] = []
    for p in sorted(phases, key=lambda p: p.start_s):
        if out and out[-1][0] == p.name and p.start_s - out[-1][2] <= 1e-12:
            out[-1][2] = p.end_s
        else:
            out.append([p.name, p.start_s, p.end_s])
    return [tuple(x) for x in out]


def plot_dataparallel(comparison, scaling: bool = True) -> Figure:
    """The figure of a DataParallel-beside-DDP comparison (see module doc)."""
    c = comparison
    n = c.n_devices
    rows = n + 2 * c.ddp.n_devices
    panels = [rows * 0.42 + 1.2] + ([2.6] if scaling and len(c.scaling) > 1 else [])
    fig = Figure(figsize=(10, sum(panels) + 0.8))
    axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": panels})
    axes = list(axes) if len(panels) > 1 else [axes]
    _draw_timelines(axes[0], c)
    if len(panels) > 1:
        _draw_scaling(axes[1], c)
    fig.suptitle(f"{c.label}: nn.DataParallel beside DDP, {c.costs.model}, batch {c.costs.batch} on "
                 f"{n} device{'s' if n > 1 else ''} ({c.costs.device})",
                 fontsize=11, color=TEXT)
    fig.tight_layout(rect=(0, 0, 1, 0.985))  # room between the suptitle and the first panel's title
    return fig


def _draw_timelines(ax, c) -> None:
    ms = 1e3
    labels, y = [], 0
    for d in range(c.dp.n_devices):
        for name, s, e in merged(c.dp.on(d)):
            ax.barh(y, (e - s) * ms, left=s * ms, height=0.7, color=COLORS.get(name, GRID),
                    edgecolor="white", linewidth=0.3)
        labels.append(f"DP device {d}")
        y += 1
    for r in range(c.ddp.n_devices):
        for name, s, e in merged(c.ddp.on(r)):
            row = y + 1 if name == "allreduce" else y
            ax.barh(row, (e - s) * ms, left=s * ms, height=0.7 if row == y else 0.45,
                    color=COLORS.get(name, GRID), edgecolor=TEXT if row != y else "white", linewidth=0.3)
        labels += [f"DDP rank {r}", "  allreduce"]
        y += 2
    for t in (c.dp.iteration_s, c.ddp.iteration_s):  # each iteration's end
        ax.axvline(t * ms, color=TEXT, linestyle=":", linewidth=0.8)
    ax.set_yticks(range(len(labels)), labels, fontsize=8.5)
    ax.set_ylim(len(labels) - 0.4, -0.8)
    ax.set_xlabel(f"time in one iteration (ms, {c.label})")
    ax.grid(axis="x", color=GRID)
    ax.set_axisbelow(True)
    present = {p.name for p in c.dp.phases + c.ddp.phases}
    handles = [Patch(color=COLORS[names[0]], label=text) for text, names in LEGEND.items() if present & set(names)]
    ax.legend(handles=handles, fontsize=7.5, ncol=5,
              loc="upper center", bbox_to_anchor=(0.5, -0.05 - 0.6 / len(labels)), frameon=False)
    ax.set_title(f"DataParallel {c.dp.iteration_s * ms:.2f} ms, DDP {c.ddp.iteration_s * ms:.2f} ms: "
                 f"DDP at {c.speedup:.2f}x the speed ({c.label})", fontsize=9.5, color=TEXT)


def _draw_scaling(ax, c) -> None:
    n = [row[0] for row in c.scaling]
    ax.plot(n, [row[1] * 1e3 for row in c.scaling], "o-", color=OKABE_ITO[3], label="DataParallel")
    ax.plot(n, [row[2] * 1e3 for row in c.scaling], "s-", color=OKABE_ITO[2], label="DDP")
    ax.set_xlabel("devices (the same total batch, split)")
    ax.set_ylabel("iteration (ms)")
    ax.set_xticks(n)
    ax.set_ylim(bottom=0)
    ax.grid(color=GRID)
    ax.legend(fontsize=8)
    ax.set_title(f"Iteration time against the number of devices ({c.label})", fontsize=9.5, color=TEXT)
