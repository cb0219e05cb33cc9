"""The Record page with real recordings, and that no recording process outlives the app."""
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from conftest import child_env
from devtools import group_alive
from ddpsim import samples

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    monkeypatch.setenv("DDPSIM_RUNS_DIR", str(tmp_path / "runs"))


def test_finished_recordings_come_back_and_a_broken_one_says_so(tmp_path):
    """What the app finds in its runs folder after a reload (hand-made: no recording runs here)."""
    tiny = (Path(__file__).parent / "fixtures" / "tiny_trace.json").read_text()
    for name, state, text in (("good", "done", tiny), ("going", "running", tiny), ("bad", "done", "{not json"),
                              ("cut", "failed", tiny), ("refused", "failed", ""), ("hollow", "failed:empty", tiny)):
        folder = tmp_path / "runs" / f"{name}-x1"
        folder.mkdir(parents=True)
        said = {"state": "failed", "kept": False} if state == "failed:empty" else {"state": state}
        (folder / "status.json").write_text(json.dumps(said))
        (folder / f"{name}.json").write_text(text)
    at = AppTest.from_file(APP, default_timeout=60).run()
    options = at.selectbox(key="ddpsim_source").options
    assert "recorded: good" in options and "recorded: bad" in options and "recorded: going" not in options
    # what a failed recording kept is not lost on a reload; one that wrote nothing is not offered
    assert "recorded (partial): cut" in options and not any("refused" in o or "hollow" in o for o in options)
    at.selectbox(key="ddpsim_source").set_value("recorded: good").run()
    assert not at.exception and not at.error and len(at.image) == 1
    at.selectbox(key="ddpsim_source").set_value("recorded: bad").run()
    assert not at.exception and len(at.error) == 1 and at.error[0].value.startswith("Could not open recorded: bad")
    (tmp_path / "runs" / "going-x1" / "status.json").write_text(json.dumps({"state": "done"}))
    at.run()  # it finished while this session was open (another tab's, or the page was away)
    assert "recorded: going" in at.selectbox(key="ddpsim_source").options
    # The Record page's own result, when the sidebar found the file first (the page was away while it finished)
    at.session_state["ddpsim_rec_result"] = ("done", "recorded: going")
    at.switch_page("ddpsim/app/pages/record.py").run()
    assert not at.exception and any("'recorded: going' is now the open trace" in x.value for x in at.success)
    assert len(at.image) == 1, "its timeline"


def record_page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=150).run()
    at.switch_page("ddpsim/app/pages/record.py").run()
    assert not at.exception and not at.error
    return at


def submit(at, **choices):
    for key, value in choices.items():
        widget = next(w for kind in ("selectbox", "slider", "select_slider", "checkbox")
                      for w in getattr(at, kind) if w.key == f"ddpsim_rec_{key}")
        widget.set_value(value)
    at.button[0].click()  # the form's submit button
    return at.run()


@pytest.mark.slow  # a real recording from the page
def test_recording_world_size_2_finishes_and_shows_timeline():
    at = submit(record_page(), model="mlp", world=2, iters=3)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("'recorded: mlp_torch_w2' is now the open trace" in s.value for s in at.success)
    assert len(at.image) == 1  # its timeline
    assert at.session_state["ddpsim_source"] == "recorded: mlp_torch_w2"
    trace = at.session_state["ddpsim_uploads"]["recorded: mlp_torch_w2"]
    assert trace.world_size == 2 and len(trace.ranks[0].iterations) == 3
    # The new trace opens on the Timeline page too.
    at.switch_page("ddpsim/app/pages/timeline.py").run()
    assert not at.exception and len(at.image) == 1
    # The same options recorded again: a second run, kept beside the first (it used to replace it).
    at.switch_page("ddpsim/app/pages/record.py").run()
    at = submit(at, model="mlp", world=2, iters=3)
    assert not at.exception and not at.error
    assert at.session_state["ddpsim_source"] == "recorded: mlp_torch_w2 (2)"
    assert at.session_state["ddpsim_uploads"]["recorded: mlp_torch_w2"] is trace
    # A reload, another tab: a new session still offers both, read back from the app's runs folder.
    again = AppTest.from_file(APP, default_timeout=150).run()
    assert {"recorded: mlp_torch_w2", "recorded: mlp_torch_w2 (2)"} <= set(again.selectbox(key="ddpsim_source").options)
    again.selectbox(key="ddpsim_source").set_value("recorded: mlp_torch_w2 (2)").run()
    assert not again.exception and not again.error and len(again.image) == 1
    assert again.query_params["trace"] == "recorded: mlp_torch_w2 (2)"  # the address names the open trace
    reloaded = AppTest.from_file(APP, default_timeout=150)
    reloaded.query_params["trace"] = "recorded: mlp_torch_w2 (2)"
    reloaded.run()  # the same address again: it opens where it was
    assert reloaded.session_state["ddpsim_source"] == "recorded: mlp_torch_w2 (2)" and len(reloaded.image) == 1


@pytest.mark.slow  # a real recording from the page
def test_failing_recording_shows_reason_on_page():
    at = submit(record_page(), model="branchy", world=2, iters=3)
    assert not at.exception
    assert len(at.error) == 1
    message = at.error[0].value
    assert message.startswith("The recording failed:")
    assert "find_unused_parameters" in message
    assert not at.image
    assert not [b for b in at.button if b.label == "Stop the recording"]  # nothing left to stop: no dead button
    # what the ranks recorded before the failure is kept and opened, not lost in the runs folder
    label = "recorded (partial): branchy_torch_w2"
    assert at.session_state["ddpsim_source"] == label and not at.session_state["ddpsim_uploads"][label].complete
    assert any(label in c.value for c in at.caption)
    again = AppTest.from_file(APP, default_timeout=60)  # a reload: a new session at the same address
    again.query_params["trace"] = label
    again.run()
    assert not again.exception and again.selectbox(key="ddpsim_source").value == label
    assert again.selectbox(key="ddpsim_source").options.count(label) == 1


def test_no_recording_process_outlives_a_killed_app(tmp_path):
    """A job whose app dies (SIGKILL: no clean-up in the app) stops itself and its ranks."""
    script = (
        "import sys, time, json\n"
        "from ddpsim.app import jobs\n"
        "job = jobs.start({'model': 'mlp', 'world_size': 2, 'iters': 500}, 'long')\n"
        "print(job.pid, flush=True)\n"
        "time.sleep(600)\n")
    app = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           env=child_env())
    try:
        pgid = int(app.stdout.readline())
        deadline = time.monotonic() + 60
        while len(group_alive(pgid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(group_alive(pgid)) >= 3  # the job and its two ranks are running
        app.send_signal(signal.SIGKILL)
        app.wait()
        deadline = time.monotonic() + 15
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert group_alive(pgid) == []
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()


def test_jobs_stop_all_ends_the_group():
    from ddpsim.app import jobs

    job = jobs.start({"model": "mlp", "world_size": 2, "iters": 500}, "stopme")
    try:
        assert job in jobs.live()
        jobs.stop_all()  # what atexit runs when the app exits
        assert job.proc.poll() is not None and job not in jobs.live()
        assert group_alive(job.pid) == []
    finally:
        jobs.stop(job)


def test_stopping_a_recording_keeps_what_it_recorded():
    """The page's Stop button (``jobs.stop``: SIGTERM to the job's group) ends a recording; what its
    ranks had recorded stays as a partial trace that loads and that the app offers again."""
    from ddpsim import load_trace
    from ddpsim.app import jobs

    job = jobs.start({"model": "mlp", "world_size": 2, "iters": 500, "timeout_s": 300}, "stopme")
    try:
        deadline = time.monotonic() + 120
        while (status := jobs.poll(job))["state"] in ("starting", "running") and status.get("done", 0) < 3:
            assert time.monotonic() < deadline, status
            time.sleep(0.2)
        assert status["state"] == "running", status
        jobs.stop(job)
        said = json.loads(job.status_path.read_text())  # a stop the user asked for is no failure
        assert said["state"] == "stopped" and said["error"] is None and said["kept"] is True and said["done"] >= 3
        assert jobs.poll(job)["state"] == "stopped"
        assert (job.out, True) in jobs.kept_recordings()
        trace = load_trace(job.out)
        assert trace.ranks and not any(r.complete for r in trace.ranks)  # stopped, and says so
        assert all(len(r.iterations) >= 2 for r in trace.ranks)
        assert group_alive(job.pid) == []
    finally:
        jobs.stop(job)


@pytest.mark.slow  # a real recording from the page, stopped as the page's Stop button stops it
def test_a_stopped_recording_says_so_without_an_error():
    """A Stop showed 'The recording failed: the recording was stopped' in red, and that the launcher stops
    every rank when one fails. ``jobs.stop`` is what the Stop button calls; here it comes from another thread
    while the page waits on the job (AppTest cannot click while the script runs)."""
    from ddpsim.app import jobs

    def stop_after_two():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            live = jobs.live()
            if live and jobs.poll(live[0]).get("done", 0) >= 2:
                return jobs.stop(live[0])
            time.sleep(0.1)

    stopper = threading.Thread(target=stop_after_two)
    stopper.start()
    try:
        at = submit(record_page(), model="mlp", world=2, iters=20)
    finally:
        stopper.join()
    assert not at.exception and not at.error, [e.value for e in at.error]
    said = [i.value for i in at.info if i.value.startswith("Stopped at ")]
    assert len(said) == 1 and "/20 iterations, as asked" in said[0] and "(marked incomplete)" in said[0], said
    label = "recorded (partial): mlp_torch_w2"
    trace = at.session_state["ddpsim_uploads"][label]
    assert at.session_state["ddpsim_source"] == label and not trace.complete
    assert f"({jobs.iterations(len(trace.longest_rank.iterations))})" in said[0]
    assert not any("failed" in c.value for c in at.caption)


def test_the_progress_line_says_what_the_ranks_do_before_the_first_iteration():
    """The bar read 'Recording: 0/6 iterations' from 1.2 s to 45.5 s while torch imported and the ranks
    started: until a rank trains, the line says what the ranks do (their heartbeats), then counts."""
    from ddpsim.app import jobs

    job = jobs.start({"model": "mlp", "world_size": 2, "iters": 3, "timeout_s": 60}, "startline")
    lines = []
    try:
        deadline = time.monotonic() + 120
        while (status := jobs.poll(job))["state"] in ("starting", "running"):
            assert time.monotonic() < deadline, status
            if status["state"] == "running":
                line = jobs.progress_text(status["done"], status["total"], status.get("stage"))
                lines += [line] if not lines or lines[-1] != line else []
            time.sleep(0.02)
    finally:
        jobs.stop(job)
    assert status["state"] == "done", status
    first_count = next(i for i, line in enumerate(lines) if line.startswith(("Recording:", "All ")))
    assert lines[0] == jobs.STARTING, lines
    assert all(line.startswith("Starting the ranks") for line in lines[:first_count]), lines
    assert any(" started): rank " in line for line in lines[:first_count]), lines  # a rank's own stage
    assert not any(line.startswith("Starting") for line in lines[first_count:]), lines


def test_a_hook_with_another_implementation_is_refused_on_the_page():
    """minddp with fp16 failed in the recording process with 'needs --impl torch', a flag the page has not."""
    at = submit(record_page(), model="mlp", world=2, iters=3, impl="minddp", hook="fp16")
    assert not at.exception and "ddpsim_job" not in at.session_state
    assert any("choose 'torch DDP' as the Implementation" in e.value for e in at.error)


def test_the_progress_line_says_what_follows_the_last_iteration():
    """At 10/10 the recording still times hook costs and merges its ranks' files; the page showed
    'Recording: 10/10 iterations' beside a Stop button, and a Stop then kept a whole run as a partial one."""
    from ddpsim.app import jobs

    assert jobs.progress_text(3, 10) == "Recording: 3/10 iterations"
    assert jobs.progress_text(10, 10).startswith("All 10 iterations recorded; finishing")


@pytest.mark.slow  # a real recording from the page
def test_recording_with_a_comm_hook_from_the_page():
    """The Record page had no comm-hook choice, while the What-if page prices hooks at the costs a
    recording measures: fp16 from the page records torch's fp16_compress_hook and its watched casts."""
    at = submit(record_page(), model="mlp", world=2, iters=3, hook="fp16")
    assert not at.exception and not at.error, [e.value for e in at.error]
    trace = at.session_state["ddpsim_uploads"]["recorded: mlp_torch_w2_fp16"]
    assert trace.meta["options"]["comm_hook"] == "fp16" and trace.meta.get("hook_rates")
    assert all(b.compress_ns is not None for b in trace.ranks[0].iterations[-1].buckets)
