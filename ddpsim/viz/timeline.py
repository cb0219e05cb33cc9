"""The per-rank timeline of one iteration: what DDP did, and when.

For each rank, from top to bottom:
  compute          forward, backward and optimizer-step bars; a tick on the backward
                   bar for every gradient that became ready (coloured by its bucket);
                   an import's busy GPU kernels as a band along them (``busyband.py``)
  buckets ready    a triangle when a bucket is full; a dashed tail while it waits
                   for lower-indexed buckets to launch first
  allreduce        one bar per bucket from launch to completion, in as many lanes as
                   allreduces overlap (gloo runs two at once); the bitmap allreduce
                   of find_unused_parameters too; with a comm hook, its compute and
                   collectives inside each bucket's bar (``hookspan.py``)
The exposed communication (from the last gradient ready to the last allreduce
completion, ``ddpsim.analysis.exposed_comm_ns``) is hatched.
"""
from __future__ import annotations

from textwrap import wrap

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle
from matplotlib.transforms import blended_transform_factory

from ddpsim.analysis import comm_end_ns, exposed_comm_ns
from ddpsim.errors import first_line
from ddpsim.trace import Iteration, RankTrace, Trace
from ddpsim.viz import palette as pal
from ddpsim.viz.describe import describe_iteration, describe_run
from ddpsim.viz.exposed_label import place_label
from ddpsim.viz.busyband import BAND as BUSY_BAND, draw_busy, legend_handles as busy_legend
from ddpsim.viz.hookspan import assign_lanes, draw_hooked_bucket, legend_handles as hook_legend

MS = 1e-6  # milliseconds per nanosecond
BAR = 0.72  # bar height, in row units
TITLE_CHARS = 95  # characters of the iteration's title line that fit a 10-inch figure at 11.5 pt
HEADER, GAP = 0.9, pal.TRACK_GAP  # rank header row height, gap after each rank


def plot_timeline(trace: Trace, iteration: int, ranks: list[int] | None = None,
                  window: tuple[float, float] | None = None, ax: Axes | None = None) -> Figure:
    """Draw one iteration's per-rank timeline; returns the Figure. ranks: rank numbers to show (default
    all). window: (start_ms, end_ms) to zoom, relative to the iteration start. ax: draw into this Axes."""
    chosen = _select_ranks(trace, ranks)
    its = {r.rank: r.iteration(iteration) for r in chosen}
    present = [it for it in its.values() if it is not None]
    if not present:
        known = sorted({x.iteration for r in trace.ranks for x in r.iterations})
        raise ValueError(f"iteration {iteration} is not in the trace (it has {_ranges(known)})")
    t0 = min(it.forward.start_ns for it in present)
    ms = lambda t: (t - t0) * MS  # noqa: E731
    t_end = max(max(it.end_ns, comm_end_ns(it) or 0) for it in present)
    xlim = window or (-0.02 * ms(t_end), 1.02 * ms(t_end))

    lanes = {r.rank: _lanes(its[r.rank]) for r in chosen}
    n_lanes = max([1] + [max(v.values(), default=0) + 1 for v in lanes.values()])
    height_units = len(chosen) * (HEADER + 2 + n_lanes + GAP)
    if ax is None:
        fig = Figure(figsize=(10, 1.9 + 0.34 * height_units), layout="constrained")
        ax = fig.add_subplot()
        own_figure = True
    else:
        fig, own_figure = ax.figure, False
    ax.set_xlim(*xlim)
    axes_inches = ax.get_position().width * fig.get_figwidth()
    minlabel = (9 * 0.62 / 72) / axes_inches * (xlim[1] - xlim[0])  # one 9 pt character, in ms

    y, yticks, ylabels = _draw_ranks(ax, trace, chosen, its, iteration, lanes, n_lanes, ms, minlabel, xlim)

    pal.finish_track_axes(ax, y, yticks, ylabels, "time since the iteration start (ms)", 9.5)
    ax.set_title("\n".join([describe_run(trace), *wrap(describe_iteration(trace, iteration), TITLE_CHARS)]),
                 loc="left", fontsize=11.5)  # a long title wraps (no_sync's one ran past the figure's edge)
    handles = _legend_handles(trace, chosen, present)
    if own_figure:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)),
                   fontsize=9.5, frameon=False)
    else:
        ax.legend(handles=handles, fontsize=8, loc="upper right", ncol=2)
    return fig


NOTE_CHARS = 70  # a rank's error in its header: one line this long (a stack or gloo's essay ran off the figure)


def rank_note(rank) -> str:
    """``  (incomplete: why)`` for a rank that stopped, ``  (why)`` for one that finished with a diagnosis
    (the rank that ran out of data in a hang); the error's first line, cut to NOTE_CHARS."""
    why = first_line(rank.error)
    why = why if len(why) <= NOTE_CHARS else why[:NOTE_CHARS - 1].rstrip() + "…"
    if rank.complete:
        return f"  ({why})" if why else ""
    return f"  (incomplete: {why or 'stopped'})"


def _draw_ranks(ax, trace, chosen, its, iteration, lanes, n_lanes, ms, minlabel, xlim):
    """Each chosen rank's header and rows, top to bottom: (the bottom y, tick positions, tick labels)."""
    yticks, ylabels, y = [], [], 0.0
    label_x = blended_transform_factory(ax.transAxes, ax.transData)
    for rank in chosen:
        it = its[rank.rank]
        rows = {"head": y, "compute": y + HEADER, "ready": y + HEADER + 1}
        rows["comm"] = rows["ready"] + 1
        bottom = rows["comm"] + n_lanes
        ax.axhspan(y - GAP / 2, bottom + GAP / 2, color="#F6F6F6" if rank.rank % 2 else "white",
                   zorder=0, lw=0)
        head = f"rank {rank.rank}" + rank_note(rank)
        ax.text(0.002, rows["head"] + 0.45, head, transform=label_x, fontsize=10.5,
                fontweight="bold", va="center", color=pal.TEXT)
        for name, label in (("compute", "compute"), ("ready", "buckets ready"), ("comm", "allreduce")):
            yticks.append(rows[name] + 0.5)
            ylabels.append(label)
        for k in range(1, n_lanes):
            yticks.append(rows["comm"] + k + 0.5)
            ylabels.append(f"allreduce ({k + 1})")
        shadow = next((x for x in rank.join.shadows if x.iteration == iteration), None) if rank.join else None
        if it is None and shadow is not None:
            _draw_shadow(ax, rank, shadow, rows, ms, minlabel)
        elif it is None:
            ax.text(xlim[0], rows["compute"] + 0.5, f"  rank {rank.rank} has no iteration {iteration}",
                    va="center", fontsize=9, style="italic")
        else:
            _draw_rank(ax, trace, rank, it, rows, lanes[rank.rank], n_lanes, ms, minlabel, len(head))
        y = bottom + GAP
    return y, yticks, ylabels


def _draw_rank(ax, trace, rank: RankTrace, it: Iteration, rows, lanes, n_lanes, ms, minlabel,
               head_chars: int = 14, unit: str = "ms"):
    """Draw one rank's rows; ``head_chars``: length of the name at the left of its header row; ``unit``: what
    ``ms`` maps nanoseconds to (ms, or s for an iteration of minutes)."""
    yc, yr, ym = rows["compute"], rows["ready"], rows["comm"]
    pad = (1 - BAR) / 2
    for span, color, label in ((it.forward, pal.FORWARD, "forward"),
                               (it.backward, pal.BACKWARD, "backward"),
                               (it.optimizer, pal.OPTIMIZER, "step")):
        if span is None:
            continue
        _bar(ax, ms(span.start_ns), ms(span.end_ns), yc + pad, color, label, minlabel,
             gid=f"{label}:r{rank.rank}", text_y=yc + 0.5)
    draw_busy(ax, rank.rank, it, yc + 1 - pad - BUSY_BAND, ms)  # an import's GPU kernels, inside the bars
    if it.graph_search:
        g = it.graph_search
        ax.add_patch(Rectangle((ms(g.start_ns), yc + 0.55), ms(g.end_ns) - ms(g.start_ns), 0.35,
                               facecolor=pal.GRAPH_SEARCH, edgecolor=pal.TEXT, ls="--", lw=0.8,
                               hatch="...", zorder=3, gid=f"graph_search:r{rank.rank}"))

    owner = _param_to_bucket(rank, it.iteration)
    ticks: dict[tuple[str, bool], list[float]] = {}  # one collection per colour and style: fast
    for g in it.grad_ready:
        color = pal.bucket_color(owner[g.param]) if g.param in owner else pal.TEXT
        ticks.setdefault((color, g.unused), []).append(ms(g.t_ns))
    for (color, unused), xs in ticks.items():
        ax.vlines(xs, yc + pad, yc + 1 - pad, colors=color, lw=2.2, zorder=4,
                  linestyles=":" if unused else "-", gid=f"grad_ready:r{rank.rank}:{color}:{int(unused)}")

    if not it.sync:
        ax.text(ms(it.backward.start_ns), ym + n_lanes / 2,
                "no_sync: no bucket is reduced; gradients stay local until the next synced step",
                va="center", fontsize=8.5, style="italic", color=pal.TEXT)
    _draw_collectives(ax, rank, it, yr, ym, lanes, ms, minlabel)
    _draw_exposed(ax, rank, it, rows, n_lanes, ms, minlabel, head_chars, unit)


def _draw_shadow(ax, rank: RankTrace, shadow, rows, ms, minlabel):
    """A rank out of data inside ``model.join()``: the zero-filled allreduces it issues so that the
    others' complete (Note [Join] in ddpsim/minddp/join.py)."""
    ax.text(ms(shadow.start_ns), rows["compute"] + 0.5, "  joined (out of data): no compute; Join shadows "
            "the others' allreduces with zeros", va="center", fontsize=8.5, style="italic", color=pal.TEXT)
    previous_end = None  # one process group runs its collectives in order: each bar from the previous one's end
    for k, c in enumerate(shadow.allreduces):
        start = c.launch_ns if previous_end is None else max(c.launch_ns, previous_end)
        _bar(ax, ms(start), ms(c.complete_ns), rows["comm"] + (1 - BAR) / 2, pal.bucket_color(k),
             f"b{k} zeros", minlabel, gid=f"shadow:r{rank.rank}:b{k}", text_y=rows["comm"] + 0.5)
        previous_end = c.complete_ns


def _draw_collectives(ax, rank: RankTrace, it: Iteration, yr, ym, lanes, ms, minlabel):
    """Bucket-ready triangles (and the wait to launch), one allreduce bar per bucket, the bitmap,
    the buffer broadcast."""
    pad = (1 - BAR) / 2
    for b in it.buckets:
        color = pal.bucket_color(b.bucket)
        if b.launch_ns > b.ready_ns:
            ax.plot([ms(b.ready_ns), ms(b.launch_ns)], [yr + 0.5] * 2, color=color, lw=1.2,
                    ls=(0, (2, 1.5)), zorder=3)
        ax.plot(ms(b.ready_ns), yr + 0.5, marker="v", ms=8.5, color=color, mec=pal.TEXT, mew=0.6,
                ls="none", zorder=4, gid=f"bucket_ready:r{rank.rank}:b{b.bucket}")
        lane = lanes[("b", b.bucket)]
        if b.collectives is not None:  # a comm hook: its compute and collectives inside the bar (hookspan.py)
            draw_hooked_bucket(ax, rank.rank, b, ym + lane + pad, BAR, ms, minlabel)
            continue
        _bar(ax, ms(b.launch_ns), ms(b.complete_ns), ym + lane + pad, color, f"b{b.bucket}",
             minlabel, gid=f"allreduce:r{rank.rank}:b{b.bucket}", text_y=ym + lane + 0.5)
    if it.bitmap_allreduce:
        c = it.bitmap_allreduce
        lane = lanes[("bitmap", 0)]
        _bar(ax, ms(c.launch_ns), ms(c.complete_ns), ym + lane + pad, pal.BITMAP, "bitmap",
             minlabel, gid=f"bitmap:r{rank.rank}", text_y=ym + lane + 0.5)
    if it.buffer_broadcast:
        c = it.buffer_broadcast
        lane = lanes[("buffers", 0)]
        _bar(ax, ms(c.launch_ns), ms(c.complete_ns), ym + lane + pad, pal.BUFFERS, "buffers",
             minlabel, gid=f"buffer_broadcast:r{rank.rank}", text_y=ym + lane + 0.5)


def _draw_exposed(ax, rank: RankTrace, it: Iteration, rows, n_lanes, ms, minlabel, head_chars: int, unit="ms"):
    """Hatch the exposed communication and label it, in ``unit``, in the rank's header row."""
    yc, yr, ym = rows["compute"], rows["ready"], rows["comm"]
    exposed = exposed_comm_ns(it)
    if exposed > 0:
        start, end = ms(it.backward_compute_end_ns), ms(it.backward_compute_end_ns + exposed)
        ax.add_patch(Rectangle((start, yr), end - start, 1 + n_lanes, facecolor="none",
                               edgecolor=pal.EXPOSED, hatch="////", lw=0, alpha=0.55, zorder=2.5,
                               gid=f"exposed:r{rank.rank}"))
        ax.vlines(start, yc, ym + n_lanes, colors=pal.EXPOSED, lw=1, ls=":", zorder=5)
        label = f"exposed {end - start:,.{2 if end - start < 1 else 1}f} {unit}"  # 0.01 ms read "0.0 ms"
        ha, x, which = place_label(ax.get_xlim(), start, end, minlabel * len(label) * 1.1,  # bold 9.5 pt, x units
                                   minlabel, head_chars, [ms(b.ready_ns) for b in it.buckets])
        y = rows["head"] + 0.45 if which == "head" else rows["ready"] + 0.5
        ax.text(x, y, label, ha=ha, va="center", fontsize=9.5, color=pal.EXPOSED, fontweight="bold",
                clip_on=True, zorder=7, bbox={"fc": "white", "ec": "none", "pad": 0.5, "alpha": 0.8})


def _bar(ax, start, end, y, color, label, minlabel, gid, text_y):
    width = max(end - start, 0)
    ax.add_patch(Rectangle((start, y), width, BAR, facecolor=color, edgecolor=pal.TEXT, lw=0.6,
                           zorder=3, gid=gid))
    if width >= minlabel * (len(label) + 1.5):  # label only bars the text fits in
        ax.text(start + width / 2, text_y, label, ha="center", va="center", fontsize=9,
                color=pal.text_color_on(color), zorder=6, clip_on=True)


def _lanes(it: Iteration | None) -> dict:
    if it is None:
        return {}
    keys, spans = [], []
    for b in it.buckets:
        keys.append(("b", b.bucket))
        spans.append((b.launch_ns, b.complete_ns))
    if it.bitmap_allreduce:
        keys.append(("bitmap", 0))
        spans.append((it.bitmap_allreduce.launch_ns, it.bitmap_allreduce.complete_ns))
    if it.buffer_broadcast:
        keys.append(("buffers", 0))
        spans.append((it.buffer_broadcast.launch_ns, it.buffer_broadcast.complete_ns))
    return dict(zip(keys, assign_lanes(spans)))


def _param_to_bucket(rank: RankTrace, iteration: int) -> dict[int, int]:
    layout = rank.layout_at(iteration)
    return {p: b.index for b in (layout.buckets if layout else []) for p in b.params}


def _select_ranks(trace: Trace, ranks) -> list[RankTrace]:
    if ranks is None:
        return list(trace.ranks)
    by_number = {r.rank: r for r in trace.ranks}
    missing = [r for r in ranks if r not in by_number]
    if missing:
        raise ValueError(f"no rank {missing[0]} in the trace (ranks {sorted(by_number)})")
    return [by_number[r] for r in ranks]


def _legend_handles(trace: Trace, chosen, present: list[Iteration]) -> list:
    h = [Patch(facecolor=pal.FORWARD, edgecolor=pal.TEXT, lw=0.6, label="forward"),
         Patch(facecolor=pal.BACKWARD, edgecolor=pal.TEXT, lw=0.6, label="backward")]
    if any(it.optimizer for it in present):
        h.append(Patch(facecolor=pal.OPTIMIZER, edgecolor=pal.TEXT, lw=0.6, label="optimizer step"))
    h.append(Line2D([], [], marker="|", ms=10, mew=2.2, ls="none", color=pal.TEXT,
                    label="gradient ready (its bucket's colour)"))
    buckets = sorted({b.bucket for it in present for b in it.buckets})
    if buckets:
        h.append(Line2D([], [], marker="v", ms=8, ls="none", color="white", mec=pal.TEXT,
                        label="bucket ready (- - waits to launch)"))
    for k in buckets[:7]:
        h.append(Patch(facecolor=pal.bucket_color(k), edgecolor=pal.TEXT, lw=0.6,
                       label=f"allreduce b{k}"))
    if len(buckets) > 7:
        h.append(Patch(facecolor="white", edgecolor="white", label=f"... {len(buckets)} buckets"))
    h += hook_legend(present) + busy_legend(present)
    if any(it.bitmap_allreduce for it in present):
        h.append(Patch(facecolor=pal.BITMAP, edgecolor=pal.TEXT, label="used-param bitmap allreduce"))
    if any(it.buffer_broadcast for it in present):
        h.append(Patch(facecolor=pal.BUFFERS, edgecolor=pal.TEXT, label="buffer broadcast (rank 0's)"))
    if any(it.graph_search for it in present):
        h.append(Patch(facecolor="white", edgecolor=pal.TEXT, ls="--", hatch="...",
                       label="unused-param graph search"))
    if any(exposed_comm_ns(it) > 0 for it in present):
        h.append(Patch(facecolor="none", edgecolor=pal.EXPOSED, hatch="////",
                       label="exposed communication"))
    return h


def _ranges(numbers: list[int]) -> str:
    if not numbers:
        return "no iterations"
    return f"iterations {numbers[0]}..{numbers[-1]}" if len(numbers) > 1 else f"iteration {numbers[0]}"
