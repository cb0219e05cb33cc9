"""Two or more runs on one shared time axis, and their headline numbers side by side.

Each run gets the same three rows as a rank in ``plot_timeline`` (compute with
gradient-ready ticks, buckets ready, allreduce lanes), drawn for one rank and one
iteration, with time measured from that iteration's start so runs line up at 0.
Real and simulated runs mix freely; simulated ones are labelled as such.
"""
from __future__ import annotations

import statistics

from matplotlib.figure import Figure
from matplotlib.transforms import blended_transform_factory

from ddpsim.analysis import comm_end_ns, cycle_metrics, spread, steady_cycles, steady_summary, summarize
from ddpsim.trace import Trace
from ddpsim.viz import palette as pal
from ddpsim.viz.describe import describe_run
from ddpsim.viz.scaling import time_unit
from ddpsim.viz.timeline import GAP, HEADER, _draw_rank, _lanes, _legend_handles

Run = tuple[str, Trace]  # (label, trace)


def steady_iteration(trace: Trace) -> int:
    """The last synced iteration of the steady state (what a run looks like once settled)."""
    return steady_cycles(trace)[-1][-1]


def typical_iteration(trace: Trace) -> int:
    """The steady-state iteration closest to the run's medians (iteration time and exposed comm).

    The most typical single iteration: drawing it keeps the figure close to the medians of
    ``compare_rows``, where one steady iteration picked otherwise can sit anywhere in the
    run's iteration-to-iteration spread. Ties go to the earlier iteration.
    """
    keys = ("iteration_time_s", "exposed_comm_s")
    rows = [(c[-1], cycle_metrics(trace, c)) for c in steady_cycles(trace)]
    med = {k: statistics.median(m[k] for _, m in rows) for k in keys}
    return min(rows, key=lambda r: sum(abs(r[1][k] - med[k]) / (med[k] or 1) for k in keys))[0]


def usable_runs(runs: list[Run]) -> tuple[list[Run], list[str]]:
    """(runs with a synced iteration to compare, labels of those without one, e.g. partial runs)."""
    flags = [steady_summary(t) is not None for _, t in runs]
    return [run for run, f in zip(runs, flags) if f], [run[0] for run, f in zip(runs, flags) if not f]


def _pick(trace: Trace, iteration: int | None, rank: int):
    """(the rank, its iteration) to draw: ``rank``'s ``iteration`` (default: the most typical), and where
    ``rank`` did not record it (a rank whose data ran out under Join) ``Trace.longest_rank``'s; a run
    without ``iteration`` at all, its most typical one."""
    r = next((x for x in trace.ranks if x.rank == rank), trace.longest_rank)
    has = lambda n: any(x.iteration(n) is not None for x in (r, trace.longest_rank))  # noqa: E731
    n = iteration if iteration is not None and has(iteration) else typical_iteration(trace)
    r = r if r.iteration(n) is not None else trace.longest_rank  # the cycles are longest_rank's
    return r, r.iteration(n)


HEAD_CHARS = 100  # characters of a run's header line that fit the axes at 10 pt bold (10-inch figure)
HEAD_MIN_PT = 7.0  # a longer header is set smaller, down to this size, before its name is cut


def _header(label: str, suffix: str) -> tuple[str, float]:
    """(the header line, its font size): ``label`` and ``suffix`` whole at 10 pt where they fit, else in
    smaller type, and below ``HEAD_MIN_PT`` the label cut to fit (``middle_cut``)."""
    size = min(10.0, max(HEAD_MIN_PT, 10.0 * HEAD_CHARS / (len(label) + len(suffix))))
    return middle_cut(label, int(HEAD_CHARS * 10.0 / size) - len(suffix)) + suffix, size


def middle_cut(label: str, n: int) -> str:
    """``label`` in at most ``n`` characters: a longer one keeps a little of its start and most of its
    end around an ellipsis (a kept what-if's name ends in the settings that tell it apart)."""
    if len(label) <= n:
        return label
    head = max(1, (n - 1) // 4)
    return label[:head] + "…" + label[len(label) - max(0, n - 1 - head):]


def short_names(labels: list[str], n: int) -> list[str]:
    """Each label in at most ``n`` characters (``middle_cut``), unless two would then read alike: then whole."""
    cut = [middle_cut(label, n) for label in labels]
    return cut if len(set(cut)) == len(set(labels)) else list(labels)


def plot_compare(runs: list[Run], iteration: int | None = None, rank: int = 0,
                 window: tuple[float, float] | None = None) -> Figure:
    """Draw each run's ``iteration`` (default: its median steady iteration) for ``rank`` on one axis.

    A run without that iteration shows its median steady iteration instead. window: (start_ms, end_ms).
    """
    if not runs:
        raise ValueError("nothing to compare: give at least one run")
    picked = [(label, trace, *_pick(trace, iteration, rank)) for label, trace in runs]
    lanes = [_lanes(it) for *_, it in picked]
    n_lanes_of = [max(1, max(v.values(), default=0) + 1) for v in lanes]  # each run its own lanes
    t_max_ns = max(max(it.end_ns, comm_end_ns(it) or 0) - it.forward.start_ns for *_, it in picked)
    per_s, unit = (1e3, "ms") if window else time_unit(t_max_ns * 1e-9)  # a window is in ms (the pages' zoom)
    per_ns = per_s * 1e-9
    t_max = t_max_ns * per_ns
    xlim = window or (-0.02 * t_max, 1.02 * t_max)
    height = sum(HEADER + 2 + n + GAP for n in n_lanes_of)
    fig = Figure(figsize=(10, 1.9 + 0.34 * height), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xlim(*xlim)
    axes_inches = ax.get_position().width * fig.get_figwidth()
    minlabel = (9 * 0.62 / 72) / axes_inches * (xlim[1] - xlim[0])
    label_x = blended_transform_factory(ax.transAxes, ax.transData)
    yticks, ylabels, y = [], [], 0.0
    for k, ((label, trace, r, it), lane, n_lanes) in enumerate(zip(picked, lanes, n_lanes_of)):
        rows = {"head": y, "compute": y + HEADER, "ready": y + HEADER + 1}
        rows["comm"] = rows["ready"] + 1
        bottom = rows["comm"] + n_lanes
        ax.axhspan(y - GAP / 2, bottom + GAP / 2, color="#F6F6F6" if k % 2 else "white", zorder=0, lw=0)
        kind = "SIMULATED" if trace.source == "simulated" else "real"
        t_it = cycle_metrics(trace, [it.iteration])["iteration_time_s"]
        median = ", the most typical" if iteration is None else ""
        it_scale, it_unit = time_unit(t_it)
        suffix = f"  [{kind}, rank {r.rank}, iteration {it.iteration}{median}: {t_it * it_scale:,.1f} {it_unit}]"
        shown = label.removeprefix("simulated: ") if kind == "SIMULATED" else label  # the suffix says so
        head, size = _header(shown, suffix)
        ax.text(0.002, rows["head"] + 0.45, head, transform=label_x, fontsize=size, fontweight="bold", va="center",
                color=pal.TEXT, clip_on=False).set_in_layout(False)  # a long header never squeezes the drawing
        for name, text in (("compute", "compute"), ("ready", "buckets ready"), ("comm", "allreduce")):
            yticks.append(rows[name] + 0.5)
            ylabels.append(text)
        t0 = it.forward.start_ns
        _draw_rank(ax, trace, r, it, rows, lane, n_lanes, lambda t, t0=t0: (t - t0) * per_ns, minlabel, len(head),
                   unit)
        y = bottom + GAP
    pal.finish_track_axes(ax, y, yticks, ylabels, f"time since each run's iteration start ({unit})", 9)
    ax.set_title(f"{len(picked)} runs on one time axis (rank {rank})", loc="left", fontsize=11.5)
    handles = _legend_handles(picked[0][1], None, [it for *_, it in picked])
    fig.legend(handles=handles, loc="outside lower center", ncol=min(4, len(handles)),
               fontsize=9, frameon=False)
    return fig


def comm_hook_name(trace: Trace) -> str:
    """The run's comm hook as ``--comm-hook`` named it (``meta.options.comm_hook``, written by the
    recorder and the simulator alike), or ``"none"``: DDP's own fp32 allreduce of each bucket."""
    options = trace.meta.get("options")
    name = options.get("comm_hook") if isinstance(options, dict) else None
    return name if isinstance(name, str) and name else "none"


def sent_bytes(trace: Trace) -> int:
    """Bytes the lowest-numbered rank that recorded each steady synced step sent for its gradients there (rank 0
    but where its data ran out under Join): the hook's collectives where it had one (``BucketEvent.collectives``),
    else each bucket's allreduce; the median over the steps (PowerSGD sends less once it starts)."""
    per = [sum(sum(c.bytes for c in b.collectives) if b.collectives is not None else b.bytes for b in it.buckets)
           for cycle in steady_cycles(trace) for it in trace.iteration_on_ranks(cycle[-1])[:1] if it.sync]
    return int(statistics.median(per)) if per else 0


def compare_rows(runs: list[Run]) -> list[dict]:
    """Steady-state numbers per run, with differences against the first run.

    Keys: run, kind, model, world_size, buckets, comm_hook (``comm_hook_name``), sent_bytes
    (``sent_bytes``: what the gradients' collectives sent per synced step), iteration_ms, exposed_comm_ms,
    (medians over steady iterations), overlap_pct (``summarize``'s: HTA's over the steady iterations, the
    figure every page shows; None where no collective communicated, the noop hook), iteration_min_ms, iteration_max_ms,
    exposed_min_ms, exposed_max_ms, spread_pct (how much single iterations vary, +-%),
    n_iterations, and d_iteration_ms, d_exposed_comm_ms, d_overlap_pts, speedup (first / this).
    """
    rows = []
    for label, trace in runs:
        s, headline = spread(trace), summarize(trace)  # overlap: the one figure, HTA's (summarize)
        layout = trace.longest_rank.layouts[-1] if trace.longest_rank.layouts else None
        t, e = s["iteration_time_s"], s["exposed_comm_s"]
        rows.append({"run": label, "kind": trace.source, "model": describe_run(trace),
                     "world_size": trace.world_size, "buckets": len(layout.buckets) if layout else 0,
                     "comm_hook": comm_hook_name(trace), "sent_bytes": sent_bytes(trace),
                     "iteration_ms": t["median"] * 1e3, "exposed_comm_ms": e["median"] * 1e3,
                     "overlap_pct": headline["overlap_fraction"] * 100 if headline["communicates"] else None,
                     "iteration_min_ms": t["min"] * 1e3, "iteration_max_ms": t["max"] * 1e3,
                     "exposed_min_ms": e["min"] * 1e3, "exposed_max_ms": e["max"] * 1e3,
                     "spread_pct": t["rel"] * 100, "n_iterations": t["n"]})
    if rows:
        first = rows[0]
        for row in rows:
            row["d_iteration_ms"] = row["iteration_ms"] - first["iteration_ms"]
            row["d_exposed_comm_ms"] = row["exposed_comm_ms"] - first["exposed_comm_ms"]
            both = None not in (row["overlap_pct"], first["overlap_pct"])
            row["d_overlap_pts"] = row["overlap_pct"] - first["overlap_pct"] if both else None
            row["speedup"] = first["iteration_ms"] / row["iteration_ms"] if row["iteration_ms"] else None
    return rows
