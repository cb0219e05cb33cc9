"""The What-if page's scaling curve: the chosen options at every world size, each iteration split into
compute, exposed communication and waiting for stragglers (ddpsim/app/scaling.py, ddpsim/viz/scaling.py).
The page's own tests drive it in the app: tests/test_app_pages.py (AppTest) and test_e2e_browser.py."""
import math

import pytest

from ddpsim import load_trace, samples
from ddpsim.app import scaling, whatif
from ddpsim.viz import plot_scaling
from ddpsim.viz.scaling import share

UNCHANGED = dict(bucket_cap_mb=None, order="torch", find_unused_parameters=False, no_sync_every=1, algo=None,
                 broadcast_buffers=None, comm_hook=None, last_bucket_small=None)


@pytest.fixture(autouse=True)
def bundled(monkeypatch):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)


def gpu_model(gpu="v100", net="eth25"):
    base = whatif.Base("synthetic", "resnet50", gpu, net, None, {"world_size": 64})
    return base, whatif.workload(base, None)


def recording(name):
    trace = load_trace(samples.sample_path(name))
    base = whatif.base_for(trace, name)
    return base, trace, whatif.workload(base, trace)


def test_the_parts_add_up_to_the_iteration_the_what_if_shows():
    base, work = gpu_model()
    rows, notes = scaling.rows(base, None, work, {**UNCHANGED, "network": "eth25"})
    assert notes == [] and [r["world_size"] for r in rows] == list(whatif.WORLD_SIZES)
    for r in rows:
        assert math.isclose(r["compute_s"] + r["exposed_comm_s"] + r["waiting_s"], r["iteration_time_s"], rel_tol=1e-12)
        assert min(r["compute_s"], r["exposed_comm_s"], r["waiting_s"]) >= 0
    assert rows[0]["efficiency"] == 1.0 and rows[0]["waiting_s"] == 0 and rows[0]["nccl"] == ""
    assert all(r["waiting_s"] > 0 for r in rows[1:])  # the V100 profile's rank spread: every collective waits
    assert rows[-1]["nccl"].startswith("tree/")  # NCCL's trees at 100,000 ranks, rings on one node
    assert rows[1]["nccl"].startswith("ring/")
    # the chosen size's bar is the what-if the page shows: its time, and its waiting
    cfg = whatif.sim_config(base, None, "torch", False, 1, 64, "eth25", work=work)
    out = whatif.evaluate(work, base, None, cfg)
    at64 = next(r for r in rows if r["world_size"] == 64)
    assert math.isclose(at64["iteration_time_s"], out.summary["iteration_time_s"], rel_tol=1e-12)
    assert math.isclose(at64["waiting_s"], out.waits[0], rel_tol=1e-9)
    assert math.isclose(at64["efficiency"], rows[0]["iteration_time_s"] / at64["iteration_time_s"])
    text = scaling.describe(rows, 64)
    assert "from 1 to 100,000 ranks" in text and "The what-if's 64 ranks (the outlined bar)" in text


def test_a_recording_leaves_out_the_sizes_whose_network_it_does_not_know():
    base, trace, work = recording("01_mlp_torch_default")  # 2 gloo ranks on this machine's CPU
    seen = []  # the page's progress bar: one step per size simulated, of the sizes it can simulate
    rows, notes = scaling.rows(base, trace, work, {**UNCHANGED, "network": whatif.AS_RECORDED},
                               progress=lambda done, total: seen.append((done, total)))
    assert [r["world_size"] for r in rows] == [1, 2] and seen == [(1, 2), (2, 2)]
    assert notes == ["4 to 100,000 ranks: nothing was measured about the recording's network there; a what-if at "
                     "one of them prices its allreduce with the ring model fitted at the recorded 2 ranks, a guess it "
                     "labels, which the curve does not draw (pick a network above, or move World size to one of "
                     "them and press its Measure button)"]
    assert "the recorded 2 ranks too" in scaling.describe(rows, 2, recorded=2)
    rows, notes = scaling.rows(base, trace, work, {**UNCHANGED, "network": "ib100"})  # a network chosen: every size
    assert [r["world_size"] for r in rows] == list(whatif.WORLD_SIZES) and notes == []
    base, trace, work = recording("10_h100_resnet18_gloo_2ranks")  # gloo on a GPU: no network beyond its own
    rows, notes = scaling.rows(base, trace, work, {**UNCHANGED, "network": whatif.AS_RECORDED})
    assert [r["world_size"] for r in rows] == [1, 2]
    assert notes[0].startswith("4 to 100,000 ranks: nothing is known") and "measure" not in notes[0]
    base, trace, work = recording("11_h200_resnet50_nccl_1rank")  # NCCL on one H200: every size, on its node
    rows, notes = scaling.rows(base, trace, work, {**UNCHANGED, "network": whatif.AS_RECORDED})
    assert [r["world_size"] for r in rows] == list(whatif.WORLD_SIZES) and notes == []


def test_the_recorded_sizes_bar_is_the_what_ifs_unchanged_run():
    """The convnet sample's ranks ran lastingly apart (backward 1.26x and 0.74x). Asked for 4 ranks, the What-if
    set its unchanged 2-rank run at 3.79 ms of waiting for stragglers (every rank at the median speed), where the
    curve's 2-rank bar kept the recorded speeds and counted the slow rank as compute: 0.39 ms waiting."""
    base, trace, work = recording("05_convnet_torch_no_sync3")
    choices = {**UNCHANGED, "no_sync_every": 3, "network": whatif.AS_RECORDED}
    at2 = next(r for r in scaling.rows(base, trace, work, choices, sizes=(1, 2))[0] if r["world_size"] == 2)
    out = whatif.evaluate(work, base, trace, whatif.sim_config(base, None, "torch", False, 3, 4, whatif.AS_RECORDED,
                                                               work=work, trace=trace))
    assert at2["waiting_s"] > 0.001
    assert math.isclose(at2["iteration_time_s"], out.unchanged_summary["iteration_time_s"], rel_tol=1e-12)
    assert math.isclose(at2["waiting_s"], out.waits[1], rel_tol=1e-9)


def test_an_algorithm_that_does_not_run_at_a_size_is_nccls_choice_there():
    base, work = gpu_model("h100", "ib400")
    rows, notes = scaling.rows(base, None, work, {**UNCHANGED, "network": "ib400", "algo": "nvls"}, sizes=(1, 8, 16))
    assert [r["world_size"] for r in rows] == [1, 8, 16]
    assert rows[1]["nccl"].startswith("nvls/")  # one node of 8 H100s: NVLink SHARP runs
    assert notes == ["nvls does not run at 16 ranks on h100: NCCL's choice there"]
    assert not rows[2]["nccl"].startswith("nvls/")


def test_the_figure_has_a_bar_per_size_and_outlines_the_chosen_one():
    base, work = gpu_model()
    rows, _ = scaling.rows(base, None, work, {**UNCHANGED, "network": "eth25"}, sizes=(1, 8, 64, 100_000))
    fig = plot_scaling(rows, chosen=64)
    ax = fig.axes[0]
    for part in ("compute_s", "exposed_comm_s", "waiting_s"):
        assert len([p for p in ax.patches if p.get_gid() == f"scaling_{part}"]) == 4
    assert len([p for p in ax.patches if p.get_gid() == "scaling_chosen"]) == 1
    assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == ["1", "8", "64", "100k"]
    assert "100%" in [t.get_text() for t in ax.texts]
    with pytest.raises(ValueError, match="no world sizes"):
        plot_scaling([])
    fig = plot_scaling(rows, chosen=64, title="by world size")  # the legend sat over the title
    fig.canvas.draw()
    title, legend = fig._suptitle.get_window_extent(), fig.legends[0].get_window_extent()
    assert fig._suptitle.get_text() == "by world size" and not title.overlaps(legend)
    assert legend.y1 < fig.axes[0].get_window_extent().y0  # under the axis
    names = lambda f: [t.get_text() for t in f.legends[0].get_texts()]  # noqa: E731
    assert "the what-if's world size" in names(fig) and "the what-if's world size" not in names(
        plot_scaling(rows, chosen=3))  # no bar of 3 ranks to outline: none in the legend either


def test_the_sizes_an_algorithm_does_not_run_at_make_one_note():
    base, work = gpu_model("h100", "ib400")
    _, notes = scaling.rows(base, None, work, {**UNCHANGED, "network": "ib400", "algo": "nvls"})
    assert notes == ["nvls does not run at 16 to 100,000 ranks on h100: NCCL's choice there"]


def test_a_world_size_off_the_sliders_steps_is_in_the_curve():
    base = whatif.Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 48})  # 6 nodes of 8
    rows, _ = scaling.rows(base, None, whatif.workload(base, None), {**UNCHANGED, "network": "eth25"})
    assert [r["world_size"] for r in rows] == sorted({*whatif.WORLD_SIZES, 48})
    assert "The what-if's 48 ranks (the outlined bar)" in scaling.describe(rows, 48)


def test_the_learn_pages_numbers_are_the_curves():
    """The Learn page's "More ranks: what grows" quotes the step out of one node from this curve."""
    from ddpsim.app import learn

    base, work = gpu_model()
    rows, _ = scaling.rows(base, None, work, {**UNCHANGED, "network": "eth25"}, sizes=(8, 16))
    quoted = f"{rows[0]['iteration_time_s'] * 1e3:.1f} ms per\niteration at 8 ranks, {rows[1]['iteration_time_s'] * 1e3:.1f} ms at 16"
    assert quoted in learn.TOPICS["scaling"].text


def test_a_flat_ring_at_100000_ranks_is_drawn_in_seconds():
    base, trace, work = recording("05_convnet_torch_no_sync3")  # a CPU recording over a datasheet link
    rows, _ = scaling.rows(base, trace, work, {**UNCHANGED, "no_sync_every": 3, "network": "ib100"}, sizes=(1, 100_000))
    assert rows[-1]["iteration_time_s"] > 10  # gloo's ring over 100,000 ranks: 2(k-1) steps of latency
    ax = plot_scaling(rows).axes[0]  # a bar of milliseconds beside one of seconds: both seen on a log axis
    assert ax.get_ylabel() == "iteration time (s, log scale)" and ax.get_yscale() == "log"
    assert ax.get_ylim()[0] < rows[0]["iteration_time_s"] / 2 + 1e-12
    assert [t.get_text() for t in ax.texts][-1] == share(rows[-1]["efficiency"]) != "0%"
    assert plot_scaling(rows[:1]).axes[0].get_ylabel() == "iteration time (ms)"
    assert plot_scaling(rows[:1]).axes[0].get_yscale() == "linear"
    assert [share(e) for e in (1.0, 0.0951, 0.094, 0.002, 0.0004)] == ["100%", "10%", "9.4%", "0.2%", "<0.1%"]


def test_the_pages_progress_bar_counts_and_is_gone_after_the_work():
    """``app.cache.progress_bar``: the sweep's and the curve's bar on the What-if page, made and emptied inside
    their cached functions (a reused result replays to no bar). The first run leaves its bar at 3 of 7 to be
    seen; the second ends it (emptying needs a run's session) and runs a bar to its end."""
    from streamlit.testing.v1 import AppTest

    def page():
        import streamlit as st

        from ddpsim.app import cache

        if (left := st.session_state.pop("bar", None)) is not None:
            left.__exit__(None, None, None)
            with cache.progress_bar("Simulating every world size", "world sizes") as tell:
                tell(7, 7)
            return
        bar = st.session_state["bar"] = cache.progress_bar("Simulating every world size", "world sizes")
        bar.__enter__()(3, 7)

    at = AppTest.from_function(page).run()
    assert not at.exception
    bars = at.get("progress")
    assert len(bars) == 1 and bars[0].proto.text == "Simulating every world size: 3/7 world sizes"
    assert bars[0].proto.value == 42  # percent: 3 of 7
    at.run()
    assert not at.exception and not at.get("progress")


def test_the_buffers_broadcast_is_communication_not_compute():
    """ResNet-50's BatchNorm buffers (212,904 B) are broadcast before every forward: on 25 GbE that is
    communication nothing overlaps, so it is in the exposed part, and the compute is the same at every
    size (it grew with the broadcast's cost when the split counted it as compute)."""
    base, work = gpu_model()
    rows, _ = scaling.rows(base, None, work, {**UNCHANGED, "network": "eth25"}, sizes=[1, 8, 1024])
    assert [r["world_size"] for r in rows] == [1, 8, 1024]
    assert rows[1]["compute_s"] == pytest.approx(rows[0]["compute_s"], rel=1e-6)
    assert rows[2]["compute_s"] == pytest.approx(rows[0]["compute_s"], rel=1e-6)
    off, _ = scaling.rows(base, None, work, {**UNCHANGED, "network": "eth25", "broadcast_buffers": False},
                          sizes=[1024])
    assert rows[2]["exposed_comm_s"] > off[0]["exposed_comm_s"]
