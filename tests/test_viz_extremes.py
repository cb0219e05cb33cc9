"""Figures stay legible from 1 to 200+ buckets and 2 to 4096 ranks.

Legible, checked on the drawn figure: it draws without error, no two texts of one
panel overlap each other or the panel's title, and a layout panel labels at most
~30 buckets (every k-th one beyond that). The traces are simulated GPU runs
(BERT-large: 391 parameters), so bucket counts and world sizes reach the extremes.
"""
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from ddpsim.sim import SimConfig, simulate, synthetic
from ddpsim.viz import plot_buckets, plot_compare, plot_timeline
from ddpsim.viz.buckets import LABEL_ALL

CAPS = {1: 10000.0, 38: None, 97: 5.0, 220: 0.01}  # buckets in the rebuilt layout -> cap (MiB)


@pytest.fixture(scope="module")
def bert():
    return synthetic("bert-large", "a100-eth100")


def run(work, cap, world=64):
    trace, _ = simulate(work, SimConfig(world_size=world, iters=3, bucket_cap_mb=cap, trace_ranks=2))
    return trace


def texts(ax):
    return [t for t in ax.texts if t.get_text() and t.get_visible()]


def overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of texts whose drawn boxes intersect, within each panel (title included)."""
    FigureCanvasAgg(fig).draw()
    r = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        items = texts(ax) + [t for t in (ax.title, ax._left_title) if t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(r)) for t in items]
        for i, (a, ba) in enumerate(boxes):
            for b, bb in boxes[i + 1:]:
                if ba.overlaps(bb) and ba.width > 0 and bb.width > 0:
                    bad.append((a, b))
    return bad


@pytest.mark.parametrize("n", sorted(CAPS))
def test_buckets_figure_at_any_bucket_count(bert, n):
    trace = run(bert, CAPS[n])
    assert len(trace.ranks[0].layouts[-1].buckets) == n
    fig = plot_buckets(trace)
    assert overlaps(fig) == []
    rebuilt = fig.axes[-1]
    labelled = [t for t in texts(rebuilt) if t.get_text().startswith("b")]
    assert 1 <= len(labelled) <= LABEL_ALL + 1
    assert len(rebuilt.get_yticklabels()) <= LABEL_ALL + 1
    if n > LABEL_ALL:
        assert "labels on every" in rebuilt.get_title(loc="left")


@pytest.mark.parametrize("world", [2, 64, 1024, 4096])
def test_timeline_and_compare_at_any_world_size(bert, world):
    trace = run(bert, None, world)
    base = run(bert, None)
    last = max(it.iteration for it in trace.ranks[0].iterations)
    for fig in (plot_timeline(trace, last),
                plot_compare([("unchanged (SIMULATED)", base), ("what-if (SIMULATED)", trace)])):
        assert overlaps(fig) == [], world
        exposed = [t for t in texts(fig.axes[0]) if t.get_text().startswith("exposed")]
        assert exposed, "the exposed communication is labelled"
