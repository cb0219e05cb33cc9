"""Every dashboard page, driven with AppTest on the bundled samples (real and simulated)."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from apputil import run_waiting
from ddpsim import load_trace, samples

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = "ddpsim/app/pages/"
SIM = "20_sim_resnet50_v100-eth25_w64_default"


@pytest.fixture(autouse=True)
def bundled(monkeypatch):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)


def page(name: str, source: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90).run()
    if source:
        at.selectbox(key="ddpsim_source").set_value(source).run()
    at.switch_page(PAGES + name).run()
    ok(at)
    return at


def ok(at):
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def markdown(at) -> str:
    return "\n".join(m.value for m in at.markdown) + "\n".join(c.value for c in at.caption)


def test_bundled_samples_cover_real_minddp_and_simulated():
    names = samples.list_samples()
    assert any("_torch_" in n for n in names) and any("_minddp_" in n for n in names)
    sims = [n for n in names if "_sim_" in n]
    assert any("resnet50" in n for n in sims) and any("bert" in n for n in sims)


def test_timeline_zoom_and_downloads():
    at = page("timeline.py")
    assert len(at.image) == 1
    first = at.image[0].value
    zoom = at.slider[0]
    lo, hi = zoom.value
    zoom.set_value((lo, hi / 2)).run()
    ok(at)
    assert at.image[0].value != first
    labels = [b.label for b in at.get("download_button")]
    assert {"Figure (PNG)", "Figure (SVG)", "Trace (ddpsim JSON)", "Chrome / Perfetto trace"} <= set(labels)
    # The CPU lesson is said on the page of a real gloo run.
    assert "compete" in markdown(at)


def test_timeline_shows_torchs_own_timing_of_the_iteration_it_logged():
    """The bundled MLP's logging data times iteration 3 (Note [Torch's logger as a second clock]): there the
    page shows torch's figures beside the recording's; at iteration 2 it says nothing of them."""
    from ddpsim.analysis.torch_logger import against_torch_logger
    from ddpsim.app import timeline_notes as notes
    from ddpsim.trace import load_trace

    at = page("timeline.py")
    slider = next(s for s in at.select_slider if s.key.startswith("ddpsim_iteration:"))
    assert "01_mlp_torch_default" in slider.key  # the page opens on the first bundled sample
    slider.set_value(3).run()
    ok(at)
    said = [c.value for c in at.caption if c.value.startswith("torch's own DDP logger")]
    assert len(said) == 1 and "timed this iteration on rank 0: forward " in said[0], said
    row = against_torch_logger(load_trace(samples.sample_path("01_mlp_torch_default")))[0]
    assert f"communication {row['torch']['backward_comm_time'] * 1e3:.1f} ms" in said[0]
    assert f"communication {row['recorded']['backward_comm_time'] * 1e3:.1f} ms" in said[0]
    assert said[0].endswith(notes.LOGGER_OVERLAP)  # two figures called overlap, told apart
    next(s for s in at.select_slider if s.key.startswith("ddpsim_iteration:")).set_value(2).run()
    ok(at)
    assert not any(c.value.startswith("torch's own DDP logger") for c in at.caption)


def test_timeline_on_simulated_sample_is_labelled():
    at = page("timeline.py", SIM)
    assert any("SIMULATED" in i.value for i in at.info)
    assert len(at.image) == 1


def test_buckets_page_layouts_and_table():
    at = page("buckets.py")
    assert len(at.image) == 1
    text = markdown(at)
    assert "construction** layout from iteration 0" in text and "rebuilt** layout from iteration 1" in text
    assert "reverse" in text.lower() and "reducer.cpp" in text
    table = at.dataframe[0].value
    assert {"param", "name", "bytes", "ready_position"} <= set(table.columns)


def test_compare_real_and_simulated_with_differences():
    at = page("compare.py")
    at.multiselect(key="ddpsim_compare_runs").set_value(["01_mlp_torch_default", SIM]).run()
    ok(at)
    df = at.dataframe[0].value
    assert list(df["kind"]) == ["real", "simulated"]
    assert list(df["comm hook"]) == ["none", "none"]  # DDP's own allreduce in both
    assert df["Δ iteration (ms)"].iloc[0] == 0 and df["Δ iteration (ms)"].iloc[1] > 0
    assert {"iteration (ms, median)", "iteration range (ms)", "exposed range (ms)"} <= set(df.columns)
    # what a reader compares comes first, before a narrow window cuts the table
    assert list(df.columns)[:7] == ["run", "iteration (ms, median)", "Δ iteration (ms)", "exposed comm (ms, median)",
                                    "Δ exposed (ms)", "overlap (%)", "Δ overlap (pts)"]
    assert "Single iterations vary" in markdown(at) and "most typical" in markdown(at)
    assert len(at.image) == 1
    first = at.image[0].value
    at.radio(key="ddpsim_compare_which").set_value("iteration 0 (before the rebuild)").run()
    ok(at)
    assert at.image[0].value != first
    # "pick a number" goes up to the last iteration recorded, not past it
    at.radio(key="ddpsim_compare_which").set_value("pick a number").run()
    number = at.number_input(key="ddpsim_compare_number")
    last = max(it.iteration for label in ("01_mlp_torch_default", SIM)
               for r in load_trace(samples.sample_path(label)).ranks for it in r.iterations)
    assert number.max == last and "the last iteration recorded" in number.help


def test_whatif_on_real_trace_changes_with_bucket_cap():
    at = run_waiting(page("whatif.py"))
    assert len(at.image) == 3  # timeline (real vs simulated), the sweep and the scaling curve (1 and 2 ranks)
    assert any("Best simulated" in s.value for s in at.success)
    assert any(c.value.startswith("Not in the curve: 4 to 100,000 ranks: nothing was measured about the "
                                  "recording's network there") for c in at.caption)
    before = {m.label: m.value for m in at.metric}
    cap = at.select_slider[0]
    assert cap.label == "Bucket cap (MiB)"
    cap.set_value(0.25).run()
    ok(at)
    after = {m.label: m.value for m in at.metric}
    assert before.keys() == after.keys() and before != after
    assert "compete" in markdown(at)  # the CPU lesson
    cmd = next(c.value for c in at.code if "ddpsim simulate" in c.value)  # the same on the command line
    assert "--trace " in cmd and "--bucket-cap-mb 0.25" in cmd, cmd


def test_whatif_choices_survive_another_page_and_the_other_source():
    """Leaving the What-if page, or switching "Start from" and back, reset every choice (a user's
    gpt2 at 128 ranks came back as the open trace at its recorded size)."""
    at = page("whatif.py")
    next(s for s in at.select_slider if s.label == "Bucket cap (MiB)").set_value(0.25).run()
    at.radio(key="ddpsim_wi_source").set_value("a GPU model").run()
    at.selectbox(key="ddpsim_wi_arch").set_value("gpt2").run()
    next(s for s in at.select_slider if s.label.startswith("World size")).set_value(128).run()
    at.switch_page(PAGES + "timeline.py").run()
    at.switch_page(PAGES + "whatif.py").run()
    ok(at)
    assert at.radio(key="ddpsim_wi_source").value == "a GPU model" and at.selectbox(key="ddpsim_wi_arch").value == "gpt2"
    assert next(s for s in at.select_slider if s.label.startswith("World size")).value == 128
    at.radio(key="ddpsim_wi_source").set_value("the open trace").run()
    ok(at)
    assert next(s for s in at.select_slider if s.label == "Bucket cap (MiB)").value == 0.25  # the trace's own choice
    at.radio(key="ddpsim_wi_source").set_value("a GPU model").run()
    assert at.selectbox(key="ddpsim_wi_arch").value == "gpt2"


def test_whatif_gpu_model_sweep_and_keep_for_compare():
    at = page("whatif.py")
    run_waiting(at.radio(key="ddpsim_wi_source").set_value("a GPU model").run())
    ok(at)
    best = next(s.value for s in at.success if "Best simulated" in s.value)
    assert "bucket_cap_mb=" in best
    # its best is the small bucket last (126.6 ms), not find_unused_parameters=True for the layout it keeps (127.0)
    assert "DDP_SET_LAST_BUCKET_CAP=1" in best and "find_unused_parameters **False**" in best, best
    assert "Waiting for stragglers" in markdown(at) and "slowest of 64" in markdown(at)  # the GPU profile's spread
    curve = next(c.value for c in at.caption if c.value.startswith("SIMULATED, the options above at each world size"))
    assert "from 1 to 100,000 ranks" in curve and "The what-if's 64 ranks (the outlined bar)" in curve, curve
    at.selectbox(key="ddpsim_wi:synthetic:v100-eth25:resnet50:algo").set_value("tree").run()  # NCCL_ALGO=Tree
    ok(at)
    assert any("Iteration time +" in m.value for m in at.markdown)  # forcing trees on 8 nodes costs time
    # Bucket size matters about 2x on the default GPU example (ResNet-50, V100, 25 GbE, 64 ranks).
    lo, hi = (float(x) for x in best.split("ranges ")[1].split(" ms")[0].split("–"))
    assert hi / lo > 1.5
    at.toggle[0].set_value(True).run()
    ok(at)
    at.selectbox(key="ddpsim_wi:synthetic:v100-eth25:resnet50:order").set_value("definition").run()
    ok(at)
    at.button(key="ddpsim_wi:synthetic:v100-eth25:resnet50:keep").click().run()
    ok(at)
    kept = [k for k in at.session_state["ddpsim_uploads"] if k.startswith("simulated: ")]
    assert len(kept) == 2 and kept[1] == "simulated: resnet50 on v100 unchanged", kept  # its reference beside it
    at.switch_page(PAGES + "compare.py").run()
    assert kept[0] in at.selectbox(key="ddpsim_source").options
    at.multiselect(key="ddpsim_compare_runs").set_value([SIM, kept[0]]).run()
    ok(at)
    assert len(at.dataframe[0].value) == 2
    noise = next(c.value for c in at.caption if "Single iterations vary" in c.value)
    assert "not at all (simulated: its 2 steady iterations repeat)" in noise and "±0%" not in noise


def test_whatif_offers_the_nccl_algorithms_that_run_at_the_world_size():
    at = page("whatif.py")
    at.radio(key="ddpsim_wi_source").set_value("a GPU model").run()
    at.selectbox(key="ddpsim_wi_gpu").set_value("h100").run()
    at.selectbox(key="ddpsim_wi_net").set_value("ib400").run()
    k = "ddpsim_wi:synthetic:h100-ib400:resnet50:"
    world = next(s for s in at.select_slider if s.label.startswith("World size"))
    world.set_value(8).run()
    assert at.selectbox(key=k + "algo").options == ["auto (NCCL's choice)", "ring", "tree", "nvls"]  # one node
    at.selectbox(key=k + "algo").set_value("nvls").run()
    ok(at)
    assert any("The what-if's 8 ranks (the outlined bar)" in c.value for c in at.caption)  # the scaling curve
    assert "Not in the curve: nvls does not run at 16 to 100,000 ranks on h100: NCCL's choice there." in markdown(at)
    curve_cli = next(c.value for c in at.code if c.value.startswith("python -m ddpsim scaling"))  # its command line
    assert "--hardware h100-ib400" in curve_cli and "--world-sizes 1,2,4,8,16,32,64,128,256,512,1024,4096,16384,100000" \
        in curve_cli and curve_cli.endswith("--algo nvls"), curve_cli
    world = next(s for s in at.select_slider if s.label.startswith("World size"))
    world.set_value(64).run()  # NVLS across nodes needs SHARP: NVLS-tree instead
    ok(at)
    assert at.selectbox(key=k + "algo").options == ["auto (NCCL's choice)", "ring", "tree", "nvls_tree"]
    assert at.selectbox(key=k + "algo").value == "auto"  # shown as auto, not a blank "Choose an option"
    assert any("nvls does not run at 64 ranks on h100: back to NCCL's choice" in c.value for c in at.caption)


def test_whatif_world_size_network_and_no_sync():
    at = page("whatif.py")
    world = next(s for s in at.select_slider if s.label.startswith("World size"))
    world.set_value(16).run()
    ok(at)
    at.selectbox(key=next(k for k in _keys(at) if k.endswith(":net"))).set_value("ib100").run()
    ok(at)
    nosync = next(s for s in at.select_slider if s.label.startswith("Sync every"))
    nosync.set_value(4).run()
    ok(at)
    run_waiting(at)  # either may wait for its button here
    ok(at)
    assert len(at.image) == 3  # the what-if, the sweep, the scaling curve


def test_whatif_long_sweep_waits_for_its_button(monkeypatch):
    """A sweep expected to take longer than ``SWEEP_ASK_S`` here waits to be asked (the transformer sample at
    16 ranks synced every 8 micro-steps: about 11 s, ``layout_sweep.expected_seconds``); here the bar is 0 s,
    so every sweep waits. Once run it stays for the choices that share it; another sweep waits again."""
    from ddpsim.app import whatif_widgets

    monkeypatch.setattr(whatif_widgets, "SWEEP_ASK_S", 0.0)
    at = page("whatif.py")
    ok(at)
    assert any(b.label.startswith("Run the sweep") for b in at.button)
    assert not any("Best simulated" in s.value for s in at.success) and "waits for the button" in markdown(at)
    next(b for b in at.button if b.label.startswith("Run the sweep")).click().run()
    ok(at)
    assert len(at.image) == 2 and any("Best simulated" in s.value for s in at.success)  # the curve still waits
    next(s for s in at.select_slider if s.label == "Bucket cap (MiB)").set_value(0.25).run()  # the same sweep
    ok(at)
    assert any("Best simulated" in s.value for s in at.success)
    assert not [b for b in at.button if b.label.startswith("Run the sweep")]
    next(s for s in at.select_slider if s.label.startswith("World size")).set_value(4).run()  # another sweep
    ok(at)
    assert not any("Best simulated" in s.value for s in at.success)
    assert [b for b in at.button if b.label.startswith("Run the sweep")]


def test_whatif_buttons_waiting_while_other_choices_move(monkeypatch):
    """With the sweep and the curve waiting for their buttons, moving another choice raised
    StreamlitValueAssignmentNotAllowedError: the page's widget keeper (``state.keep_widgets``) assigned
    the "Simulate every world size" button its value, which Streamlit refuses for a button."""
    from ddpsim.app import whatif_widgets

    monkeypatch.setattr(whatif_widgets, "SWEEP_ASK_S", 0.0)  # every long piece of work waits for its button
    at = page("whatif.py")
    for ws in (4, 8):
        next(s for s in at.select_slider if s.label.startswith("World size")).set_value(ws).run()
        ok(at)
        waiting = [b.label for b in at.button if b.label.startswith(("Run the sweep", "Simulate every world size"))]
        assert len(waiting) == 2, waiting


def _keys(at):
    return [w.key for w in at.selectbox if w.key]


def test_learn_page_cites_sources():
    at = page("learn.py")
    text = markdown(at)
    assert "VLDB 2020" in text and "pytorch.org/docs/stable/notes/ddp.html" in text
    assert "reducer.cpp" in text and "compete" in text
