"""ddpsim.viz: the timeline figure and the shared bucket colours, on the hand-made fixture."""
import copy
import io
from pathlib import Path

import matplotlib.colors as mcolors
import pytest
from matplotlib.figure import Figure

from ddpsim import load_trace, samples
from ddpsim.analysis import exposed_comm_ns
from ddpsim.trace import Collective, Span
from ddpsim.viz import bucket_color, describe_iteration, plot_timeline
from ddpsim.viz.busyband import BINS, busy_shares
from ddpsim.viz.timeline import assign_lanes

FIXTURE = Path(__file__).parent / "fixtures" / "tiny_trace.json"


@pytest.fixture(scope="module")
def trace():
    return load_trace(FIXTURE)


def by_gid(fig, prefix):
    ax = fig.axes[0]
    return [a for a in ax.patches + ax.collections + ax.lines
            if (a.get_gid() or "").startswith(prefix)]


def n_ticks(fig):
    """Gradient-ready ticks: segments of the grad_ready collections (one per colour and style)."""
    return sum(len(c.get_segments()) for c in by_gid(fig, "grad_ready:"))


def n_bucket_events(trace, iteration):
    return sum(len(it.buckets) for r in trace.ranks for it in r.iterations
               if it.iteration == iteration)


def test_iteration0_single_bucket(trace):
    fig = plot_timeline(trace, 0)
    assert isinstance(fig, Figure)
    bars = by_gid(fig, "allreduce:")
    assert len(bars) == n_bucket_events(trace, 0) == 2
    ax = fig.axes[0]
    assert "ms" in ax.get_xlabel()
    title = ax.get_title(loc="left")
    assert "iteration 0: single bucket (construction layout)" in title
    assert "tiny_mlp" in title and "world size 2" in title
    assert n_ticks(fig) == 12  # 6 params x 2 ranks
    assert len(by_gid(fig, "bucket_ready:")) == 2
    assert {p.get_facecolor()[:3] for p in bars} == {mcolors.to_rgb(bucket_color(0))}
    # Exposed communication: hatched from the last grad ready to the last completion.
    exposed = {p.get_gid(): p for p in by_gid(fig, "exposed:")}
    assert set(exposed) == {"exposed:r0", "exposed:r1"}
    it0 = trace.ranks[1].iterations[0]
    assert exposed["exposed:r1"].get_width() == pytest.approx(exposed_comm_ns(it0) * 1e-6)
    assert exposed["exposed:r1"].get_hatch()
    assert fig.legends, "the figure has a legend"


def test_iteration1_rebuilt_overlapping_allreduces_stack(trace):
    fig = plot_timeline(trace, 1)
    bars = {p.get_gid(): p for p in by_gid(fig, "allreduce:")}
    assert len(bars) == n_bucket_events(trace, 1) == 6
    assert "rebuilt layout, 3 buckets" in fig.axes[0].get_title(loc="left")
    for r in (0, 1):
        b0, b1, b2 = (bars[f"allreduce:r{r}:b{k}"] for k in range(3))
        # b0 and b1 are in flight at once, so they sit in different lanes; b2 reuses b0's lane.
        assert b0.get_x() + b0.get_width() > b1.get_x()
        assert b0.get_y() != b1.get_y()
        assert b2.get_y() == b0.get_y()
        for k, bar in enumerate((b0, b1, b2)):
            assert mcolors.to_hex(bar.get_facecolor()) == bucket_color(k).lower()
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert {"b0", "b1", "b2"} <= set(texts)
    assert any(t.startswith("exposed ") and t.endswith(" ms") for t in texts)


def test_exposed_under_a_millisecond_reads_in_hundredths():
    """The H200 run's exposed communication read "exposed 0.0 ms" beside the page's 0.01 ms."""
    gpu = load_trace(samples.BUNDLED_DIR / "11_h200_resnet50_nccl_1rank.json")
    exposed_ms = exposed_comm_ns(gpu.ranks[0].iteration(3)) * 1e-6
    assert 0 < exposed_ms < 1
    texts = [t.get_text() for t in plot_timeline(gpu, 3).axes[0].texts]
    assert f"exposed {exposed_ms:.2f} ms" in texts, texts


def test_no_sync_iteration(trace):
    fig = plot_timeline(trace, 2)
    assert by_gid(fig, "allreduce:") == []
    assert by_gid(fig, "exposed:") == []
    assert "no_sync" in fig.axes[0].get_title(loc="left")
    assert any("no_sync" in t.get_text() for t in fig.axes[0].texts)
    assert n_ticks(fig) == 12


def test_bitmap_and_graph_search_drawn(trace):
    t = copy.deepcopy(trace)
    for rank in t.ranks:
        it = rank.iterations[3]
        last = max(b.launch_ns for b in it.buckets)
        it.bitmap_allreduce = Collective(last + 100_000, last + 600_000, 24)
        it.graph_search = Span(it.forward.end_ns - 300_000, it.forward.end_ns)
    fig = plot_timeline(t, 3)
    assert len(by_gid(fig, "bitmap:")) == 2
    assert len(by_gid(fig, "graph_search:")) == 2
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "used-param bitmap allreduce" in labels and "unused-param graph search" in labels


def test_rank_subset_window_and_given_axes(trace):
    fig = plot_timeline(trace, 1, ranks=[1], window=(10, 30))
    gids = {a.get_gid() for a in by_gid(fig, "allreduce:")}
    assert gids == {"allreduce:r1:b0", "allreduce:r1:b1", "allreduce:r1:b2"}
    assert fig.axes[0].get_xlim() == (10, 30)
    outer = Figure()
    ax = outer.add_subplot()
    assert plot_timeline(trace, 0, ax=ax) is outer
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=50)  # renders all the way through
    assert buf.getvalue()[:4] == b"\x89PNG"


def test_bad_arguments_name_the_problem(trace):
    with pytest.raises(ValueError, match="iteration 9 is not in the trace"):
        plot_timeline(trace, 9)
    with pytest.raises(ValueError, match="no rank 5"):
        plot_timeline(trace, 0, ranks=[5])


def test_bucket_color_is_stable_and_distinct():
    first = [bucket_color(i) for i in range(7)]
    assert first == [bucket_color(i) for i in range(7)]
    assert len(set(first)) == 7
    assert bucket_color(7) == bucket_color(0)
    assert all(mcolors.is_color_like(c) for c in first)


def test_assign_lanes_and_describe(trace):
    assert assign_lanes([(0, 5), (4, 8), (5, 9), (8, 10)]) == [0, 1, 0, 1]
    assert assign_lanes([]) == []
    assert describe_iteration(trace, 1) == (
        "iteration 1: rebuilt layout, 3 buckets, the first allreduce on the rebuilt buckets")
    assert describe_iteration(trace, 3) == (
        "iteration 3: rebuilt layout, 3 buckets; reduces grads accumulated over 2 micro-steps")


def test_a_long_iteration_title_wraps_inside_the_figure():
    """The no_sync sample's title (118 characters at 11.5 pt) ran past the figure's right edge."""
    from ddpsim import samples
    from ddpsim.trace import load_trace
    from ddpsim.viz.timeline import TITLE_CHARS

    t = load_trace(samples.BUNDLED_DIR / "05_convnet_torch_no_sync3.json")
    assert len(describe_iteration(t, 5)) > TITLE_CHARS
    lines = plot_timeline(t, 5).axes[0].get_title(loc="left").splitlines()
    assert len(lines) == 3 and max(map(len, lines)) <= TITLE_CHARS and lines[-1].endswith("3 micro-steps"), lines


def test_a_ranks_error_is_one_short_line_in_its_header(trace):
    """A stopped rank's error (gloo's "Connection closed by peer ... GLHF!" and a Python stack) was drawn whole:
    it ran off the figure and its lines covered the plot; the rank with the launcher's diagnosis said nothing."""
    t = copy.deepcopy(trace)
    t.ranks[0].complete, t.ranks[0].error = False, "RuntimeError: Connection closed by peer " + "x" * 200 + "\n\nAt:\n  f.py(1)"
    t.ranks[1].error = "hung: ran out of data after iteration 1"
    heads = [x.get_text() for x in plot_timeline(t, 1).axes[0].texts if x.get_text().startswith("rank ")]
    assert heads[0].startswith("rank 0  (incomplete: RuntimeError: Connection closed") and heads[0].endswith("…)")
    assert "\n" not in heads[0] and len(heads[0]) < 100
    assert heads[1] == "rank 1  (hung: ran out of data after iteration 1)"


def test_an_imports_busy_kernels_are_a_band_in_its_compute_row(trace):
    """An import shows where its GPU computed (the overlap's compute: Note [Compute is the GPU's busy
    kernels]); each slice of the band is shaded by its busy share, which adds up to the busy time."""
    imported = load_trace(samples.BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json")
    bands = by_gid(plot_timeline(imported, 6), "compute_busy:")
    assert sorted(b.get_gid() for b in bands) == ["compute_busy:r0", "compute_busy:r1"]
    it = imported.ranks[0].iteration(6)
    busy = sum(e - s for s, e in it.busy(it.forward.start_ns, it.end_ns)) / (it.end_ns - it.forward.start_ns)
    assert sum(busy_shares(it)) / BINS == pytest.approx(busy, rel=1e-9) and 0.1 < busy < 0.4
    alphas = [c[3] for c in next(b for b in bands if b.get_gid().endswith("r0")).get_facecolors()]
    assert min(alphas) < 0.2 and max(alphas) > 0.9  # idle slices light, busy ones dark
    assert by_gid(plot_timeline(trace, 1), "compute_busy:") == []  # a recording: compute all through
