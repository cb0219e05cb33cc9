"""ddpsim.viz figures beyond the timeline: buckets, compare, sweep (no Streamlit)."""
import re
from pathlib import Path

import matplotlib.colors as mcolors
import pytest

from ddpsim import load_trace
from ddpsim.viz import (bucket_color, bucket_rows, compare_rows, figure_bytes, plot_buckets,
                        plot_compare, plot_sweep, steady_iteration)

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_trace.json"
SIM = Path(__file__).resolve().parents[1] / "ddpsim" / "samples" / "20_sim_resnet50_v100-eth25_w64_default.json"


@pytest.fixture(scope="module")
def trace():
    return load_trace(FIXTURE)


def gids(fig, prefix):
    return [a for ax in fig.axes for a in ax.patches + ax.lines + ax.collections
            if (a.get_gid() or "").startswith(prefix)]


def test_buckets_panels_and_table(trace):
    fig = plot_buckets(trace)
    assert len(fig.axes) == 1 + len(trace.ranks[0].layouts)
    assert all(ax.get_xlabel() for ax in fig.axes) and fig.legends
    # every parameter drawn once per layout, in its bucket's colour
    layout = trace.ranks[0].layouts[-1]
    for b in layout.buckets:
        for p in b.params:
            bar = gids(fig, f"param:{layout.kind}:b{b.index}:p{p}")
            assert len(bar) == 1 and mcolors.to_hex(bar[0].get_facecolor()) == bucket_color(b.index).lower()
    rows = bucket_rows(trace)
    assert [r["param"] for r in rows] == sorted(p.index for p in trace.params if p.index is not None)
    assert {"bucket_construction_from_it0", "bucket_rebuilt_from_it1"} <= set(rows[0])
    # gradients arrive in reverse: the first to arrive has the highest index
    assert rows[-1]["ready_position"] == 0 or rows[-1]["ready_position"] < rows[0]["ready_position"]


def test_compare_shared_axis_and_numbers(trace):
    sim = load_trace(SIM)
    fig = plot_compare([("real", trace), ("sim", sim)])
    ax = fig.axes[0]
    assert "ms" in ax.get_xlabel()
    texts = [t.get_text() for t in ax.texts]
    assert any(t.startswith("real  [real") for t in texts) and any("SIMULATED" in t for t in texts)
    assert gids(fig, "allreduce:") and gids(fig, "exposed:")
    rows = compare_rows([("real", trace), ("sim", sim)])
    assert rows[0]["d_iteration_ms"] == 0 and rows[0]["speedup"] == 1
    assert rows[1]["kind"] == "simulated" and rows[1]["world_size"] == 64
    assert rows[1]["d_iteration_ms"] == pytest.approx(rows[1]["iteration_ms"] - rows[0]["iteration_ms"])
    assert steady_iteration(trace) in {it.iteration for it in trace.ranks[0].iterations}
    assert figure_bytes(plot_compare([("a", trace)], iteration=0))[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        plot_compare([])


def test_sweep_best_marked_and_series():
    rows = [{"bucket_cap_mb": c, "order": o, "find_unused_parameters": fu,
             "iteration_time_s": (abs(c - 10) + 5 + (3 if o == "definition" else 0) + fu) / 1000,
             "exposed_comm_s": c / 10000}
            for c in (1, 10, 100) for o in ("torch", "definition") for fu in (False, True)]
    rows.append({"bucket_cap_mb": None, "order": "torch", "find_unused_parameters": False,
                 "iteration_time_s": 0.0052, "exposed_comm_s": 0.001})
    current = {"bucket_cap_mb": 100, "iteration_time_s": 0.095, "exposed_comm_s": 0.01}
    fig = plot_sweep(rows, current=current)
    ax_t, ax_e = fig.axes
    assert ax_t.get_xscale() == "log" and "MiB" in ax_t.get_xlabel() and "(ms)" in ax_t.get_ylabel()
    assert len(gids(fig, "series:")) == 8  # 2 orders x 2 find_unused x 2 panels
    assert len(gids(fig, "default:torch")) == 2
    best = gids(fig, "best")[0]
    assert list(best.get_xdata()) == [10] and list(best.get_ydata()) == pytest.approx([5.0])
    assert len(gids(fig, "current")) == 2
    for ax, key in ((ax_t, "iteration_time_s"), (ax_e, "exposed_comm_s")):  # the top markers are not cut
        assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1.05 * max(r[key] for r in rows + [current]) * 1e3
    assert any(s.get_linestyle() == "--" for s in gids(fig, "series:torch:fu"))
    assert figure_bytes(fig, "svg")[:5] in (b"<?xml", b"<svg ")
    with pytest.raises(ValueError):
        figure_bytes(fig, "gif")


def test_a_sweep_of_minutes_per_iteration_is_drawn_in_seconds():
    """A CPU run at 100,000 ranks: its axis in ms read "1e6" above it, beside a page that says seconds."""
    rows = [{"bucket_cap_mb": c, "order": "torch", "find_unused_parameters": False,
             "iteration_time_s": t, "exposed_comm_s": t - 5.0} for c, t in ((1, 100.0), (4, 400.0), (16, 900.0))]
    fig = plot_sweep(rows)
    ax_t, ax_e = fig.axes
    assert ax_t.get_ylabel() == "iteration time (s)" and ax_e.get_ylabel() == "exposed communication (s)"
    assert list(gids(fig, "best")[0].get_ydata()) == [100.0] and ax_t.get_ylim()[1] < 1000
    assert "100.0 s/iteration" in " ".join(t.get_text() for t in ax_t.texts)
    fig.savefig(__import__("io").BytesIO(), format="png")  # lays the figure out
    label = next(t for t in ax_t.texts if "s/iteration" in t.get_text())  # over a star low in the panel,
    assert label.get_window_extent().y0 > ax_t.get_window_extent().y0  # not on the axis's tick labels


def test_runs_of_minutes_per_iteration_are_compared_in_seconds():
    """A CPU run at 100,000 ranks on the What-if page: the time axis ran to 200,000 ms and the hatch read
    "exposed 197575.5 ms" beside headers in seconds."""
    from ddpsim.learn import learn
    from ddpsim.samples import sample_path
    from ddpsim.sim import SimConfig, simulate

    w = learn(load_trace(sample_path("01_mlp_torch_default")))
    slow, _ = simulate(w, SimConfig(world_size=2, iters=3, bandwidth_gbps=0.001))  # a crawl of a network
    fig = plot_compare([("slow", slow)])
    ax = fig.axes[0]
    assert ax.get_xlabel().endswith("(s)") and ax.get_xlim()[1] < 1000
    labels = [t.get_text() for t in ax.texts if t.get_text().startswith("exposed ")]
    assert labels and all(re.fullmatch(r"exposed [\d,]+\.\d s", t) for t in labels), labels
    assert plot_compare([("slow", slow)], window=(0.0, 50.0)).axes[0].get_xlabel().endswith("(ms)")  # a zoom: ms


def test_a_best_default_cap_with_find_unused_sits_on_its_level():
    """ResNet-50 on 64 V100s: the best was find_unused at the default cap, and its star floated off every
    line (only find_unused off had its default-cap level drawn)."""
    rows = [{"bucket_cap_mb": c, "order": "torch", "find_unused_parameters": fu,
             "iteration_time_s": (30 if c else 20 + 5 * (not fu)) / 1000, "exposed_comm_s": 0.001}
            for c in (None, 1, 25) for fu in (False, True)]
    fig = plot_sweep(rows)
    level = gids(fig, "default:best")
    assert len(level) == 2 and list(level[0].get_ydata()) == pytest.approx([20.0, 20.0])


def test_the_legend_names_only_the_series_drawn():
    """Sample 04 (branchy, a parameter marked unused): the sweep keeps find_unused_parameters on, so every row
    has it, yet the legend showed "find_unused off" beside "find_unused on", and its default-cap rows, named
    in the legend, were drawn nowhere. A sweep without find_unused rows names neither line style."""
    def legend(fig):
        return [t.get_text() for t in fig.legends[0].get_texts()]

    rows = [{"bucket_cap_mb": c, "order": o, "find_unused_parameters": True,
             "iteration_time_s": (20 + (c or 30) / 10 + (o == "random")) / 1000, "exposed_comm_s": 0.001}
            for c in (None, 1, 25) for o in ("torch", "random")]
    fig = plot_sweep(rows)
    texts = legend(fig)
    assert "find_unused on" in texts and "find_unused off" not in texts, texts
    assert "default cap (25 MiB, 1 MiB first)" in texts and len(gids(fig, "default:torch")) == 2
    assert not gids(fig, "series:torch:nofu") and len(gids(fig, "series:torch:fu")) == 2
    off = [{**r, "find_unused_parameters": False} for r in rows]
    assert not [t for t in legend(plot_sweep(off)) if t.startswith("find_unused")]
    both = legend(plot_sweep(rows + off))
    assert [t for t in both if t.startswith("find_unused")] == ["find_unused off", "find_unused on"]


def test_the_small_bucket_last_is_a_series_of_its_own():
    """The What-if sweep also tries torch's ordering with DDP_SET_LAST_BUCKET_CAP=1 (last_bucket_small): its
    rows are their own line and legend entry, not mixed into torch's, and a best among them says so."""
    rows = [{"bucket_cap_mb": c, "order": "torch", "find_unused_parameters": fu, "last_bucket_small": small,
             "iteration_time_s": (20 + (c or 0) / 10 - 3 * small + fu) / 1000, "exposed_comm_s": 0.001}
            for c in (None, 1, 25) for fu, small in ((False, False), (True, False), (False, True))]
    fig = plot_sweep(rows)
    assert len(gids(fig, "series:small_last:nofu")) == 2 and len(gids(fig, "series:torch:nofu")) == 2
    assert len(gids(fig, "default:small_last")) == 2 and len(gids(fig, "default:torch")) == 2
    assert any(h.get_label() == "order: torch, DDP_SET_LAST_BUCKET_CAP=1" for h in fig.legends[0].legend_handles)
    label = next(t for t in fig.axes[0].texts if t.get_text().startswith("best:")).get_text()
    assert label.startswith("best: torch default (25 MiB, 1 MiB first), torch, small bucket last"), label
    tie = [{**r, "iteration_time_s": 0.02} for r in rows if r["bucket_cap_mb"] is None and (r["find_unused_parameters"]
                                                                                         or r["last_bucket_small"])]
    assert not plot_sweep(tie).axes[0].texts[0].get_text().count("find_unused")  # as fast: the one without it


def test_the_best_label_stays_inside_its_panel():
    """With the smallest cap best, the label centred under its star covered the y axis's ticks."""
    for best in (0.25, 250):
        rows = [{"bucket_cap_mb": c, "order": "torch", "find_unused_parameters": False,
                 "iteration_time_s": (20 + abs(c - best) / 10) / 1000, "exposed_comm_s": 0.001}
                for c in (0.25, 1, 25, 250)]
        fig = plot_sweep(rows)
        fig.canvas.draw()
        ax = fig.axes[0]
        box = next(t for t in ax.texts if t.get_text().startswith("best:")).get_window_extent()
        frame = ax.get_window_extent()
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1, (best, box, frame)


def test_compare_rows_give_spread_and_figure_draws_the_typical_iteration():
    from ddpsim.analysis import cycle_metrics, steady_cycles
    from ddpsim.samples import BUNDLED_DIR
    from ddpsim.viz import typical_iteration

    runs = [(n, load_trace(BUNDLED_DIR / f"{n}.json")) for n in ("01_mlp_torch_default", "02_mlp_torch_cap0.25")]
    rows = compare_rows(runs)
    for row, (_, t) in zip(rows, runs):
        times = [cycle_metrics(t, c)["iteration_time_s"] * 1e3 for c in steady_cycles(t)]
        assert row["iteration_min_ms"] == pytest.approx(min(times)) and row["iteration_max_ms"] == pytest.approx(max(times))
        assert row["iteration_min_ms"] <= row["iteration_ms"] <= row["iteration_max_ms"]
        assert row["n_iterations"] == len(times) and row["spread_pct"] > 0  # real iterations vary
        # the drawn iteration is the steady one closest to the medians, and says so
        it = typical_iteration(t)
        assert it in [c[-1] for c in steady_cycles(t)]
        best = min(abs(x - row["iteration_ms"]) / row["iteration_ms"] for x in times)
        assert abs(cycle_metrics(t, [it])["iteration_time_s"] * 1e3 - row["iteration_ms"]) / row["iteration_ms"] \
            <= best + 0.15
    heads = [x.get_text() for x in plot_compare(runs).axes[0].texts if "most typical" in x.get_text()]
    assert len(heads) == 2


def test_compare_shows_the_same_overlap_as_every_other_page():
    """One overlap figure: the Compare table's is summarize's (HTA's over the steady iterations), which
    the Timeline and What-if pages show; it used to be the median of per-iteration overlaps (transformer:
    59.8% against 50%)."""
    from ddpsim.analysis import summarize
    from ddpsim.samples import BUNDLED_DIR

    names = ("01_mlp_torch_default", "02_mlp_torch_cap0.25", "06_transformer_torch_default")
    runs = [(n, load_trace(BUNDLED_DIR / f"{n}.json")) for n in names]
    for row, (_, t) in zip(compare_rows(runs), runs):
        assert row["overlap_pct"] == pytest.approx(summarize(t)["overlap_fraction"] * 100)


def test_construction_panel_keeps_the_bucket_scale_under_torchs_no_cap():
    """Iteration 0's one bucket is built under torch's "no cap" (2^63-1 bytes): drawn as a cap line it
    stretched the axis to 1.4e13 MiB and the 12 MiB bucket vanished; now the panel is on the bucket's scale."""
    from ddpsim.samples import BUNDLED_DIR

    trace = load_trace(BUNDLED_DIR / "01_mlp_torch_default.json")
    construction = trace.ranks[0].layouts[0]
    assert construction.kind == "construction" and construction.buckets[0].cap_bytes == 2**63 - 1
    fig = plot_buckets(trace)
    panel = fig.axes[1]
    biggest = max(b.bytes for b in construction.buckets) / 2**20
    assert panel.get_xlim()[1] <= 4 * biggest  # the rebuilt panel's 25 MiB caps share its axis
    assert not [c for c in panel.collections if c.get_segments()]  # no cap line: there is no cap
    assert any(c.get_segments() for c in fig.axes[2].collections)  # the rebuilt layout's caps are drawn


def test_a_long_run_name_keeps_the_drawing_and_its_time(trace):
    """A kept what-if's name ("simulated: recorded: mlp_torch_w2 cap=100.0 torch fu=0 n=1 w=8 as
    recorded") ran off the figure, cutting its iteration time, and squeezed every run's drawing to a
    third of the width: the header is shortened in the middle of the name, and never resizes the axes."""
    import io

    sim = load_trace(SIM)  # a kept what-if is a simulated run: its header's bracket is the longest
    long = "simulated: recorded: mlp_torch_w2 cap=100.0 torch fu=0 n=1 w=8 as recorded hook=fp16"
    widths, heads = [], []
    for name in ("a", long, long.replace("cap=100.0", "cap=0.25"), long * 3):
        fig = plot_compare([("real", trace), (name, sim)])
        fig.savefig(io.BytesIO(), format="png")  # lays the figure out
        widths.append(fig.axes[0].get_position().width)
        head = next(t for t in fig.axes[0].texts if t.get_text().endswith("ms]") and "real  [" not in t.get_text())
        box = head.get_window_extent()
        assert box.x1 <= fig.bbox.x1 + 1, (box, head.get_text())  # inside the figure, the time shown
        heads.append(head.get_text())
    assert widths[1] == pytest.approx(widths[0], rel=0.02)
    assert "cap=100.0 torch fu=0 n=1 w=8 as recorded hook=fp16  [" in heads[1] and heads[1] != heads[2]  # settings kept
    bracket = re.search(r"  \[SIMULATED, rank 0, iteration \d+, the most typical: [\d.]+ ms\]$", heads[3])
    assert "…" in heads[3] and bracket and heads[3][:bracket.start()].endswith("hook=fp16")  # cut, settings kept
    assert heads[1].startswith("recorded: mlp_torch_w2 cap=100.0")  # "simulated: " left to the bracket's SIMULATED


def test_layout_panels_share_a_scale_unless_it_would_hide_buckets(trace):
    """The same 0.53 MiB bucket was drawn at two widths in two panels (0-0.8 and 0-1.5 MiB axes)."""
    from ddpsim.samples import BUNDLED_DIR

    fig = plot_buckets(load_trace(BUNDLED_DIR / "01_mlp_torch_default.json"))  # a 12 MiB bucket, then 25 MiB caps
    assert len({ax.get_xlim() for ax in fig.axes[1:]}) == 1
    fig = plot_buckets(trace)  # a 2 KB bucket beside 25 MiB caps: one axis would hide it
    assert len({ax.get_xlim() for ax in fig.axes[1:]}) == 2


def test_short_names_keep_what_tells_runs_apart():
    """The Compare table cut three kept runs to "simulated: bert-large on v100 cap…": all alike."""
    from ddpsim.viz import short_names

    names = [f"simulated: bert-large on v100 cap=default torch fu=0 n=1 w={w} eth25{h}"
             for w, h in ((64, ""), (64, " hook=fp16"), (512, " hook=fp16"))]
    cut = short_names(names, 48)
    assert all(len(c) <= 48 for c in cut) and len(set(cut)) == 3
    assert cut[2].endswith("w=512 eth25 hook=fp16") and cut[0].startswith("simulated: ")
    alike = ["simulated: " + "x" * 40 + tail for tail in ("a" + "y" * 40, "b" + "y" * 40)]  # differ in the middle
    assert short_names(alike, 48) == alike


def test_the_exposed_label_does_not_cover_a_bucket_ready_mark():
    """A long run header pushed "exposed 8.1 ms" into the bucket-ready row, over the last mark
    ("exposed▼8.1 ms"); where the row has room after the exposed span the label goes there."""
    from ddpsim.app import whatif

    base = whatif.Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 64})
    work = whatif.workload(base, None)
    out = whatif.evaluate(work, base, None, whatif.sim_config(base, None, "torch", False, 1, 64, "eth25"))
    fig = plot_compare([("unchanged (SIMULATED) " + "x" * 60, out.unchanged), ("what-if (SIMULATED)", out.sim)])
    fig.canvas.draw()
    for ax in fig.axes:
        marks = [m.get_window_extent() for m in ax.lines if (m.get_gid() or "").startswith("bucket_ready")]
        for t in ax.texts:
            if t.get_text().startswith("exposed "):
                box = t.get_window_extent()
                assert not any(box.overlaps(m) for m in marks), t.get_text()
