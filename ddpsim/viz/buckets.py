"""Which parameter is in which bucket, and why the order is reversed.

``plot_buckets`` draws three panels for one rank:
  gradient arrival   each parameter's definition index against the order its gradient
                     became ready: a falling diagonal, because backward runs the model
                     back to front; dots in their bucket's colour (final layout). An
                     imported trace's indices come from the order itself (``numbering``)
  construction       the layout DDP built at construction (bucket 0 = last-defined params)
  rebuilt            the layout rebuilt from iteration 0's arrival order (if any)
Each layout panel has one bar per bucket, top = launched first, made of one segment
per parameter, length in MiB; the cap is the dashed line. ``bucket_rows`` gives the
same facts as a table.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ddpsim.buckets import MAXSIZE
from ddpsim.trace import Layout, Trace
from ddpsim.viz import palette as pal

MIB = 1024 * 1024


def _rank(trace: Trace, rank: int):
    return next((r for r in trace.ranks if r.rank == rank), trace.ranks[0])


def arrival_order(trace: Trace, rank: int = 0, iteration: int | None = None) -> list[int]:
    """Param indices in gradient-ready order at ``iteration`` (default: the first with gradients)."""
    r = _rank(trace, rank)
    its = [it for it in r.iterations if it.grad_ready and (iteration is None or it.iteration == iteration)]
    if not its:
        return []
    return [g.param for g in sorted(its[0].grad_ready, key=lambda g: (g.t_ns, -g.param))]


def numbering(trace: Trace) -> str:
    """Where the parameter indices come from: "definition" (DDP's own, recorded); for a trace made by
    ``ddpsim import`` (a profile has shapes, not names, docs/trace-format.md) "arrival": index n-1-k for
    the k-th gradient ready, or "model" (``import --model``): the model's indices in the model's own
    ready order, read on the meta device. An import's arrival plot is then that order, not a finding."""
    if not trace.imported:
        return "definition"
    return "model" if (trace.meta.get("sizes") or {}).get("params") == "model" else "arrival"


ARRIVAL_AXES = {  # numbering -> (the arrival panel's title, its y label)
    "definition": ("gradients arrive in reverse", "parameter index (definition order)"),
    "arrival": ("numbered by arrival (import)", "parameter index (n-1-k, from arrival)"),
    "model": ("the model's ready order (import --model)", "parameter index (the model's)"),
}


def layouts(trace: Trace, rank: int = 0) -> list[Layout]:
    return list(_rank(trace, rank).layouts)


def bucket_rows(trace: Trace, rank: int = 0) -> list[dict]:
    """One row per parameter: index, name, shape, bytes, arrival position, bucket per layout."""
    lays = layouts(trace, rank)
    order = arrival_order(trace, rank)
    position = {p: k for k, p in enumerate(order)}
    where = [{p: b.index for b in lay.buckets for p in b.params} for lay in lays]
    rows = []
    for p in sorted((p for p in trace.params if p.index is not None), key=lambda p: p.index):
        row = {"param": p.index, "name": p.name, "shape": "x".join(map(str, p.shape)) or "scalar",
               "bytes": p.bytes, "ready_position": position.get(p.index)}
        for lay, owner in zip(lays, where):
            row[f"bucket_{lay.kind}_from_it{lay.from_iteration}"] = owner.get(p.index)
        rows.append(row)
    return rows


LABEL_ALL = 30  # up to this many buckets every bar is labelled; beyond, every k-th one


def label_step(n: int) -> int:
    """Label every ``label_step(n)``-th bucket so that at most ~LABEL_ALL labels are drawn."""
    return max(1, -(-n // LABEL_ALL))


def _ordinal(k: int) -> str:
    return f"{k}{'th' if 10 <= k % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(k % 10, 'th')}"


def drawn_cap(cap_bytes: int | None) -> int | None:
    """The cap a layout panel draws: None for none, and for torch's "no cap" (2^63-1 bytes, the single
    bucket of iteration 0), which as a line would stretch the axis to 8.8e12 MiB and hide the bucket."""
    return cap_bytes if cap_bytes and cap_bytes < MAXSIZE else None


SHARED_SCALE = 4.0  # panels whose widest buckets differ less than this share one MiB axis


def _widest(lay: Layout) -> float:
    """MiB of the panel's widest bucket or drawn cap."""
    return max((max(b.bytes, drawn_cap(b.cap_bytes) or 0) for b in lay.buckets), default=1) / MIB or 1.0


def panel_scales(lays: list[Layout]) -> list[float]:
    """Each layout panel's axis (MiB): one shared axis, so the same bucket is drawn the same width in
    every panel, unless their widest buckets differ SHARED_SCALE times or more (a 100 MiB construction
    bucket would hide 0.25 MiB rebuilt ones): then each panel its own."""
    widest = [_widest(lay) for lay in lays]
    return [max(widest)] * len(widest) if max(widest) < SHARED_SCALE * min(widest) else widest


def _layout_panel(ax, trace: Trace, lay: Layout, sizes: dict[int, int], xmax: float):
    n = len(lay.buckets)
    step = label_step(n)
    lw = 0.4 if n <= LABEL_ALL else 0.15  # thin segment edges, or many buckets turn grey
    for b in lay.buckets:
        left = 0.0
        for p in b.params:
            w = sizes.get(p, 0) / MIB
            ax.barh(b.index, w, left=left, height=0.7, color=pal.bucket_color(b.index),
                    edgecolor=pal.TEXT, lw=lw, gid=f"param:{lay.kind}:b{b.index}:p{p}")
            left += w
        if b.index % step == 0:
            text = f"b{b.index}: {b.bytes / MIB:.2f} MiB" + (f", {len(b.params)} params" if step == 1 else "")
            ax.text(left + xmax * 0.01, b.index, text, va="center", fontsize=8.5 if step == 1 else 7.5,
                    color=pal.TEXT)
        if drawn_cap(b.cap_bytes):
            ax.vlines(b.cap_bytes / MIB, b.index - 0.42, b.index + 0.42, colors=pal.TEXT, lw=1, ls="--")
    ax.set_ylim(n - 0.5, -0.5)  # bucket 0 (launched first) on top
    ticks = range(0, n, step)
    ax.set_yticks(ticks, [f"b{k}" for k in ticks], fontsize=8.5 if step == 1 else 7.5)
    ax.set_xlim(0, xmax * 1.6)
    ax.set_xlabel("bucket contents (MiB)")
    ax.set_ylabel("bucket = launch order (first on top)")
    title = ("construction layout" if lay.kind == "construction" else f"{lay.kind} layout") + \
        f", from iteration {lay.from_iteration}" + (f"\n{n} buckets (labels on every {_ordinal(step)})" if step > 1 else "")
    if lay.kind == "construction" and n == 1:
        title += "\n(one bucket for iteration 0: no overlap yet)"
    ax.set_title(title, loc="left", fontsize=10.5)
    ax.grid(axis="x", color=pal.GRID)
    ax.set_axisbelow(True)


def plot_buckets(trace: Trace, rank: int = 0) -> Figure:
    """Arrival order + every bucket layout of ``rank`` (see the module docstring)."""
    lays = layouts(trace, rank)
    if not lays:
        raise ValueError("the trace has no bucket layouts for that rank")
    sizes = {p.index: p.bytes for p in trace.params if p.index is not None}
    order = arrival_order(trace, rank)
    final = {p: b.index for b in lays[-1].buckets for p in b.params}
    n_buckets = max(len(lay.buckets) for lay in lays)
    fig = Figure(figsize=(11, max(3.6, 1.6 + 0.32 * min(n_buckets, 40))), layout="constrained")
    axes = fig.subplots(1, 1 + len(lays), width_ratios=[1] + [1.3] * len(lays))
    ax = axes[0]
    if order:
        xs = list(range(len(order)))
        ax.scatter(xs, order, c=[pal.bucket_color(final.get(p, 0)) for p in order], s=22,
                   edgecolors=pal.TEXT, linewidths=0.4, zorder=3, gid="arrival")
        ax.plot(xs, order, color=pal.GRID, lw=1, zorder=2)
    title, ylabel = ARRIVAL_AXES[numbering(trace)]
    ax.set_xlabel("gradient arrival (1st, 2nd, ...)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, loc="left", fontsize=10.5)
    ax.grid(color=pal.GRID)
    ax.set_axisbelow(True)
    for lay, axl, xmax in zip(lays, axes[1:], panel_scales(lays)):
        _layout_panel(axl, trace, lay, sizes, xmax)
    m = trace.meta
    who = f"{m.get('model') or (m.get('workload') or {}).get('name') or 'model'}" + \
        (" (simulated)" if trace.source == "simulated" else "")
    fig.suptitle(f"{who}: {len(sizes)} parameters, rank {_rank(trace, rank).rank}", x=0.01,
                 ha="left", fontsize=11.5)
    handles = [Line2D([], [], marker="o", ls="none", color=pal.bucket_color(k), mec=pal.TEXT,
                      label=f"bucket b{k}") for k in range(min(len(lays[-1].buckets), 7))]
    handles.append(Line2D([], [], color=pal.TEXT, ls="--", label="bucket cap"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(8, len(handles)), fontsize=9,
               frameon=False)
    return fig
