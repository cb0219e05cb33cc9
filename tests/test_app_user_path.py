"""The user's path through the app (record, open, What-if), driven for real with AppTest on the
bundled samples: what a new user read wrong there (tests/test_app_pages.py has the pages' basics).
"""
import json
import re
import shlex

import pytest
from streamlit.testing.v1 import AppTest

from apputil import APP, with_uploads
from ddpsim.analysis import steady_cycles
from ddpsim.app import units
from ddpsim.cli import main
from ddpsim.samples import BUNDLED_DIR, sample_path
from ddpsim.trace import load_trace

NO_SYNC = "05_convnet_torch_no_sync3"  # a sync every 3 micro-steps
MLP = "01_mlp_torch_default"  # 12 MiB of gradients in 10 parameters: caps of 0.25 to 2 MiB build the same 4 buckets


def on_page(sample: str, page: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.session_state["ddpsim_source"] = sample
    at.run()
    if page is not None:
        at.switch_page(f"ddpsim/app/pages/{page}").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def widget(at: AppTest, kind: str, end: str):
    return next(w for w in getattr(at, kind) if w.key and w.key.endswith(end))


def test_a_synced_micro_step_is_set_beside_the_synced_ones():
    """Under no_sync the steady state is per micro-step (a cycle over 3); the typical synced step carries the
    whole cycle's allreduce and read "61.4 ms, up 40.9 ms vs the steady state" beside it."""
    at = on_page(NO_SYNC)
    m = {x.label: x for x in at.metric}
    exposed = m["Exposed communication, iteration 5"]
    assert exposed.value == "61.4 ms" and exposed.delta == "0.0 ms", exposed.delta
    assert exposed.proto.delta_description == "vs steady synced micro-steps"
    assert "per micro-step" in exposed.help and "20.5 ms" in exposed.help  # the What-if page's figure
    at.select_slider[0].set_value(3).run()  # a no_sync micro-step, beside the no_sync ones
    it = {x.label: x for x in at.metric}["Iteration time, iteration 3"]
    assert it.delta == "13.5 ms" and it.proto.delta_description == "vs steady no_sync micro-steps"


def test_a_gpu_model_says_when_its_ranks_fit_in_one_node():
    """A v100-eth25 model at 8 ranks runs on one node's NVLink: the exposed communication fell from 8.1 to
    0.2 ms while the page still said "Network: eth25"."""
    at = on_page(MLP, "whatif.py")
    at.radio(key="ddpsim_wi_source").set_value("a GPU model").run()
    widget(at, "select_slider", ":world").set_value(8).run()
    said = " ".join(x.value for x in at.markdown)
    assert "8 ranks fit in one node" in said and "(eth25) is not used" in said
    widget(at, "select_slider", ":world").set_value(16).run()
    said = " ".join(x.value for x in at.markdown)
    assert "16 ranks on 2 nodes: NVLink inside each node, eth25: 25 GbE TCP between them" in said


def test_the_bucket_cap_says_how_many_buckets_it_builds():
    """Caps of 1 and 0.25 MiB build the same 4 buckets of the MLP: the slider moved and nothing changed."""
    at = on_page(MLP, "whatif.py")
    count = lambda: [c.value for c in at.caption if "in the steady iterations" in c.value]  # noqa: E731
    assert count() == ["2 buckets in the steady iterations, as unchanged."]
    for cap in (1.0, 0.25):
        widget(at, "select_slider", ":cap").set_value(cap).run()
        assert count() == ["4 buckets in the steady iterations (unchanged: 2)."]


def test_a_finished_recording_shows_the_figures_record_prints():
    """The command line prints the run's iteration time, exposed communication and overlap; the Record page
    showed a figure and no number to hold the What-if page's replay against."""
    trace = load_trace(sample_path(MLP))
    at = with_uploads({"recorded: run": trace}, "record.py", "recorded: run")
    at.session_state["ddpsim_rec_result"] = ("done", "recorded: run")
    at.run()
    assert not at.exception
    said = " ".join(x.value for x in at.markdown)
    assert "iteration 39.4 ms, exposed comm 12.0 ms, overlap 36%" in said, said[:300]


def test_minutes_per_iteration_read_in_seconds():
    """A CPU recording at 100,000 ranks: the page had said "547347.5 ms" and "+1924114.2%" (in ms whatever the size),
    and its waiting line and sweep verdict "350676.9 ms" and "175367.8 ms/iteration" beside a metric of "350.7 s"."""
    at = on_page(MLP, "whatif.py")
    widget(at, "select_slider", ":world").set_value(100_000).run()
    assert not at.exception, [e.message for e in at.exception]
    iteration = next(m for m in at.metric if m.label == "Iteration time")
    assert iteration.value.endswith(" s") and iteration.delta.endswith(" s"), (iteration.value, iteration.delta)
    change = next(x.value for x in [*at.markdown, *at.caption, *at.success, *at.info]
                  if "against the same configuration" in x.value)
    assert re.search(r"\+\d{1,3}(,\d{3})+% against", change) and re.search(r"\(\d+\.\d ms → \d+\.\d s\)", change), change
    said = " ".join(x.value for x in [*at.markdown, *at.caption, *at.success, *at.info])
    assert not re.search(r"\d{5,}(\.\d+)? ms", said), re.findall(r".{60}\d{5,}(?:\.\d+)? ms", said)  # "350676.9 ms"
    assert re.search(r"of the what-if's [\d,]+\.\d s per iteration", said) and "ms/iteration" not in said, said[:600]


def test_the_record_page_records_as_many_iterations_as_the_command_line():
    """It recorded 3 by default: 2 steady iterations to learn from (their spread ±19% on one recording)."""
    at = AppTest.from_file(APP, default_timeout=120)
    at.run()
    at.switch_page("ddpsim/app/pages/record.py").run()
    iters = at.slider(key="ddpsim_rec_iters")
    assert iters.value == 6 and iters.max == 20 and "steady" in iters.help


def test_the_small_bucket_last_is_a_what_if_the_command_repeats(capsys):
    """torch's DDP_SET_LAST_BUCKET_CAP=1 (``simulate --last-bucket-small``) had no control on the page: ticked on
    ResNet-50 at 64 H100s it cuts the exposed communication as the command line does, and the page's command
    says so and prints the page's figures."""
    at = on_page(MLP, "whatif.py")
    at.radio(key="ddpsim_wi_source").set_value("a GPU model").run()
    at.selectbox(key="ddpsim_wi_gpu").set_value("h100").run()
    at.selectbox(key="ddpsim_wi_net").set_value("ib400").run()
    assert widget(at, "select_slider", ":world").value == 64
    box = widget(at, "checkbox", ":small")
    assert box.value is False and "DDP_SET_LAST_BUCKET_CAP=1" in box.help and "last gradients ready" in box.help
    shown = lambda: {m.label: m.value for m in at.metric}  # noqa: E731
    command = lambda: next(c.value for c in at.code if "ddpsim simulate" in c.value)  # noqa: E731
    before = shown()
    assert "--last-bucket-small" not in command()
    box.check().run()
    assert not at.exception, [e.message for e in at.exception]
    after, cmd = shown(), command()
    assert "--last-bucket-small" in cmd and "--hardware h100-ib400" in cmd, cmd
    for argv, metrics in ((cmd, after), (cmd.replace(" --last-bucket-small", ""), before)):
        assert main(shlex.split(argv)[3:]) == 0
        printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert metrics["Exposed communication"] == f"{printed['exposed_comm_s'] * 1e3:.2f} ms", (argv, metrics)
        assert metrics["Iteration time"] == units.duration(printed["iteration_time_s"]), (argv, metrics)
    assert after["Exposed communication"] != before["Exposed communication"]


def test_a_run_recorded_with_the_small_bucket_last_starts_with_it():
    """A recording made with DDP_SET_LAST_BUCKET_CAP=1 (``meta.options.last_bucket_small``) replays with it: the
    box starts ticked, and unticking it is a change the command writes."""
    trace = load_trace(sample_path(MLP))
    trace.meta["options"]["last_bucket_small"] = True
    at = with_uploads({"recorded: small": trace}, "whatif.py", "recorded: small")
    box = widget(at, "checkbox", ":small")
    command = lambda: next(c.value for c in at.code if "ddpsim simulate" in c.value)  # noqa: E731
    assert box.value is True and "last-bucket-small" not in command()
    box.uncheck().run()
    assert "--no-last-bucket-small" in command()


def test_a_change_that_changes_nothing_is_not_called_no_change():
    """A 1 MiB cap on the small convnet builds the same buckets: the page answered the moved slider with "move a
    control above to see what it changes", as though nothing had been moved."""
    at = on_page(NO_SYNC, "whatif.py")
    said = lambda: " ".join(x.value for x in at.markdown)  # noqa: E731
    assert "move a control above" in said()
    widget(at, "select_slider", ":cap").set_value(1.0).run()
    assert "move a control above" not in said() and "change nothing in its simulation here" in said(), said()[:400]


def test_a_change_that_moves_only_the_communication_says_so():
    """A 5 MiB cap on the mlp sample ends its iterations when the default does, but exposes 4.3 ms less
    communication: the page said the choices "change nothing in its simulation here" beside a metric that
    had moved."""
    at = on_page(MLP, "whatif.py")
    said = lambda: " ".join(x.value for x in at.markdown)  # noqa: E731
    widget(at, "select_slider", ":cap").set_value(5.0).run()
    assert "change nothing" not in said(), said()[:400]
    assert re.search(r"change how much communication is exposed \([\d.]+ ms → [\d.]+ ms\)", said()), said()[:400]


def test_a_simulated_sample_has_its_gpu_models_hook_costs():
    """A simulated sample replays its GPU model, with the profile's hook rates (the same fp16 figures as that GPU
    model picked by hand), yet the page warned that "the hook's casts and matmuls are free here"."""
    at = on_page("20_sim_resnet50_v100-eth25_w64_default", "whatif.py")
    widget(at, "selectbox", ":hook").set_value("fp16").run()
    sample = {m.label: m.value for m in at.metric}
    assert not [w.value for w in at.warning if "hook costs" in w.value], [w.value for w in at.warning]
    at.radio(key="ddpsim_wi_source").set_value("a GPU model").run()  # resnet50 on v100, eth25, 64 ranks
    widget(at, "selectbox", ":hook").set_value("fp16").run()
    assert {m.label: m.value for m in at.metric} == sample


def test_sub_millisecond_exposed_communication_reads_in_hundredths():
    """The H200 run's exposed communication of 0.01 ms read "0.0 ms" on the Timeline and What-if pages while the
    What-if's replay caption said "0.01 against 0.02 ms"."""
    at = on_page("11_h200_resnet50_nccl_1rank")
    exposed = next(m for m in at.metric if m.label.startswith("Exposed communication"))
    assert re.fullmatch(r"0\.0[1-9] ms", exposed.value), exposed.value
    at.switch_page("ddpsim/app/pages/whatif.py").run()
    exposed = next(m for m in at.metric if m.label == "Exposed communication")
    assert exposed.value == "0.01 ms" and exposed.delta == "0.00 ms", (exposed.value, exposed.delta)
    assert "exposed communication 0.01 against 0.02 ms" in " ".join(c.value for c in at.caption)


def test_the_command_names_an_uploaded_trace_as_the_sidebar_downloads_it():
    """An upload of run.json is 'upload: run.json'; the sidebar's download and the What-if page's command
    called it upload_run.json.json."""
    from ddpsim.app import ui

    at = with_uploads({"upload: run.json": load_trace(sample_path(MLP))}, "whatif.py", "upload: run.json")
    assert not at.exception, [e.message for e in at.exception]
    code = next(c.value for c in at.code if c.value.startswith("python -m ddpsim simulate"))
    assert shlex.split(code)[4:6] == ["--trace", "upload_run.json"], code
    assert ui.trace_file("upload: run.json.gz") == "upload_run.json" == ui.trace_file("upload: run.json")
    assert ui.trace_file("recorded: convnet_w2") == "recorded_convnet_w2.json"


def test_simulate_counts_one_bucket_in_the_singular(capsys):
    """The page says '1 bucket in the steady iterations'; simulate printed 'world size 2, 1 buckets'."""
    assert main(["simulate", "--trace", str(sample_path(NO_SYNC))]) == 0  # the convnet: one bucket
    assert "world size 2, 1 bucket, " in capsys.readouterr().out
    assert main(["simulate", "--trace", str(sample_path(MLP))]) == 0
    assert "world size 2, 2 buckets, " in capsys.readouterr().out


def test_a_cap_far_beyond_the_recorded_allreduces_is_cautioned(tmp_path, capsys):
    """The shuffled model recorded at cap 0.25 times allreduces of 0.75-2.28 MiB only, and the line fitted
    through them prices larger buckets far too cheaply (``layout_sweep.beyond_fitted_sizes``). Buckets over
    4x the largest recorded one say that nothing measured prices them; within that, nothing is said."""
    run = tmp_path / "shuffled.json"
    assert main(["record", "--model", "shuffled", "--world-size", "2", "--iters", "4", "--bucket-cap-mb", "0.25",
                 "--out", str(run)]) == 0
    capsys.readouterr()
    at = with_uploads({"upload: shuffled.json": load_trace(run)}, "whatif.py", "upload: shuffled.json")
    said = lambda: [w.value for w in at.warning if "the recording timed allreduces" in w.value]  # noqa: E731
    assert not any("bucket_cap_mb=0.25 " in w for w in said()), said()  # the recorded cap: measured
    widget(at, "select_slider", ":cap").set_value(5.0).run()  # 5 MiB: about 2x the largest recorded
    assert not any("bucket_cap_mb=5 " in w for w in said()), said()
    widget(at, "select_slider", ":cap").set_value(50.0).run()
    assert any(w.startswith("Caution: the recording timed allreduces of 0.75–2.28 MiB only; bucket_cap_mb=50 makes "
                            "buckets of up to 32.3 MiB") for w in said()), [w.value for w in at.warning]
    assert main(["sweep", "--trace", str(run), "--bucket-cap-mb", "50"]) == 0  # the command line's verdict
    assert "the recording timed allreduces of 0.75–2.28 MiB only; bucket_cap_mb=50" in capsys.readouterr().out


def test_the_timeline_says_what_the_first_iteration_reduced():
    """Every metric's help said "Iteration 0 is expected to differ: one bucket, reduced after the whole backward",
    true of torch's default only: with find_unused_parameters DDP reduces its construction buckets from iteration
    0 and never rebuilds (sample 04: 2 buckets), and under no_sync iteration 0 reduces nothing."""
    def helps(sample):
        return " ".join(m.help for m in on_page(sample).metric if m.help)

    said = helps("04_branchy_torch_find_unused")
    assert "Iteration 0 is expected to differ: the first, with 2 buckets in the layout the run kept" in said
    assert "one bucket" not in said
    said = helps(NO_SYNC)
    assert ("Iterations 0..2 are expected to differ: the first cycle, whose synced step (iteration 2) had one "
            "bucket, reduced after the whole backward, before the rebuild; its no_sync micro-steps reduced nothing"
            in said)
    assert "Iteration 0 is expected to differ: the first, with one bucket, reduced after the whole backward" in helps(MLP)


def _named(text: str) -> set[int]:
    """The iterations a help text calls "expected to differ" ("Iteration 4", "Iterations 0..2")."""
    out = set()
    for a, b in re.findall(r"Iterations? (\d+)(?:\.\.(\d+))? (?:is|are) expected to differ", text):
        out |= set(range(int(a), int(b or a) + 1))
    return out


@pytest.mark.parametrize("name", sorted(p.stem for p in BUNDLED_DIR.glob("*.json")))
def test_no_steady_iteration_is_said_to_differ(name):
    """The imported H100 profile (sample 10, iterations 4-6) read "Steady state (... the iterations 4..6): 44.9 ms.
    Iteration 4 is expected to differ: the first the profile holds, with 3 buckets in the layout the run kept (no
    rebuild)": iteration 4 is in that steady state, and the profile starts after torch's rebuild (its 3 buckets
    are the rebuilt sizes, ddpsim/samples/h100/README.md), so "no rebuild" was untrue too."""
    trace = load_trace(BUNDLED_DIR / f"{name}.json")
    steady = {i for c in steady_cycles(trace) for i in c}
    helps = [m.help for m in on_page(name).metric if m.help and m.help.startswith("Steady state")]
    assert helps, name
    for text in helps:
        shown = re.match(r"Steady state \([^)]*iterations? ([\d., ]+)\)", text).group(1)
        ends = [int(x) for x in re.split(r"\.\.|, ", shown)]
        shown = set(range(ends[0], ends[-1] + 1)) if ".." in text.split(")")[0] else set(ends)
        assert shown <= steady, (name, text)
        assert not _named(text) & steady, (name, text)
    held = {it.iteration for r in trace.ranks for it in r.iterations}
    if 0 not in held:  # a profile that starts later: after the first iteration and any rebuild
        k = min(held)
        assert all(f"The profile starts at iteration {k}, after the run's first iteration and any rebuild" in t
                   for t in helps), helps
        assert not any("no rebuild" in t or "expected to differ" in t for t in helps), helps


def test_a_gpu_recording_moves_to_another_world_size_on_its_own_node():
    """learn/hardware.py Note [A GPU recording at another world size]: the 1-rank H200 recording's world-size
    slider moved to 64 left a red "pick a network above" and no curve; it now runs on its GPU's node, says so,
    and gives what choosing that network gives (the page's command has no --hardware: the CLI does the same)."""
    at = on_page("11_h200_resnet50_nccl_1rank", "whatif.py")
    widget(at, "select_slider", ":world").set_value(64).run()
    assert not at.error and not at.exception, [e.value for e in at.error]
    said = " ".join(c.value for c in at.caption)
    assert "World size 64: the network is the recording's GPU's node profile (below)" in said
    assert any(w.value.startswith("The network is not the recorded one: the allreduce times come from NCCL on "
                                  "H100-SXM5 nodes") for w in at.warning)
    default = {m.label: (m.value, m.delta) for m in at.metric}
    assert default["Exposed communication"][0] != "0.01 ms" and "ranks: nothing is known" not in said
    assert any("(rank-to-rank spread 0.4%, the h100 GPU profile's, as the recording holds one rank)" in m.value
               for m in at.markdown)  # one rank measures no spread: its node's profile gives one
    assert "--hardware" not in next(c.value for c in at.code if c.value.startswith("python -m ddpsim simulate"))
    widget(at, "selectbox", ":net").set_value("nvlink").run()
    assert {m.label: (m.value, m.delta) for m in at.metric} == default


def test_a_kept_what_if_is_compared_against_the_what_if_pages_own_reference():
    """A 0.25 MiB cap kept on the mlp sample read "Δ exposed -2.7 ms" on the What-if page and -4.5 ms on Compare,
    whose reference was the recording: the replay's own error came along. The unchanged configuration, simulated,
    is kept beside it and opens first, so Compare's Δ is the page's; the recording follows (its Δ: the replay's)."""
    at = on_page(MLP, "whatif.py")
    widget(at, "select_slider", ":cap").set_value(0.25).run()
    shown = {m.label: m for m in at.metric}["Iteration time"]
    next(b for b in at.button if b.label.startswith("Keep this simulated run")).click().run()
    kept = at.session_state["ddpsim_last_kept"]
    assert kept == f"simulated: {MLP}, bucket_cap_mb=0.25"  # what changed, not every choice ("fu=0 n=1 w=2 ...")
    at.switch_page("ddpsim/app/pages/compare.py").run()
    assert not at.exception, [e.message for e in at.exception]
    chosen = at.multiselect(key="ddpsim_compare_runs").value
    assert len(chosen) == 3 and chosen[1] == kept and chosen[2] == MLP, chosen
    assert chosen[0].endswith("unchanged") and "cap=" not in chosen[0], chosen
    table = at.dataframe[0].value
    assert float(table["Δ iteration (ms)"][1]) == pytest.approx(float(shown.delta.split()[0]), abs=0.15), shown.delta
