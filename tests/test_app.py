"""The Streamlit app, driven for real with AppTest, and the samples helper.

The app reads its sample traces from ``ddpsim.samples``; these tests set
DDPSIM_SAMPLES_DIR=tests/fixtures so that the app opens on the hand-made
fixture ``tiny_trace`` whatever samples are bundled. ``test_opens_on_bundled_sample``
checks the real bundled samples.
"""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ddpsim import samples

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
APP = str(ROOT / "app.py")


@pytest.fixture
def fixture_samples(monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(FIXTURES))


def open_app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def metrics(at) -> dict:
    return {m.label: m.value for m in at.metric}


def test_opens_on_first_sample_with_figure_and_metrics(fixture_samples):
    at = open_app()
    assert at.selectbox(key="ddpsim_source").value == "tiny_trace"
    assert len(at.image) == 1  # st.pyplot shows as one image element
    assert not at.error
    # It opens on a steady-state iteration (after the rebuild), not on iteration 0.
    steady = at.select_slider[0].value
    assert steady >= 1 and f"Iteration time, iteration {steady}" in metrics(at)
    at.select_slider[0].set_value(0).run()
    m = metrics(at)
    assert m["Iteration time, iteration 0"].endswith(" ms")
    assert m["Exposed communication, iteration 0"] == "9.9 ms"
    assert m["Comm. overlapped with compute, iteration 0"] == "0%"


def test_the_address_names_the_open_trace_and_an_unknown_one_says_so(fixture_samples):
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["trace"] = "upload: gone.json"  # an upload of a session that ended
    at.run()
    assert not at.exception and at.selectbox(key="ddpsim_source").value == "tiny_trace"
    assert at.query_params["trace"] == "tiny_trace"
    assert any("“upload: gone.json” in the address is not open in this session" in c.value for c in at.caption)


def test_changing_iteration_rerenders(fixture_samples):
    at = open_app()
    at.select_slider[0].set_value(0).run()
    first = at.image[0].value
    at.select_slider[0].set_value(1).run()
    assert not at.exception
    assert len(at.image) == 1 and at.image[0].value != first
    assert "Exposed communication, iteration 1" in metrics(at)
    at.select_slider[0].set_value(2).run()  # the no_sync step
    assert metrics(at)["Exposed communication, iteration 2"] == "no allreduce"
    assert len(at.image) == 1


def test_malformed_upload_shows_error_and_keeps_previous_trace(fixture_samples):
    at = open_app()
    at.select_slider[0].set_value(1).run()
    at.file_uploader[0].set_value(("broken.json", b'{"format": "ddpsim-trace", "vers',
                                   "application/json")).run()
    assert not at.exception
    assert len(at.error) == 1
    assert "broken.json" in at.error[0].value and "previous trace" in at.error[0].value
    assert at.selectbox(key="ddpsim_source").value == "tiny_trace"
    assert len(at.image) == 1 and at.select_slider[0].value == 1
    # Still working: another iteration renders, and the error stays while the file is there.
    at.select_slider[0].set_value(3).run()
    assert len(at.image) == 1 and len(at.error) == 1
    # A valid upload opens and is selected.
    at.file_uploader[0].set_value(("mine.json", (FIXTURES / "tiny_trace.json").read_bytes(),
                                   "application/json")).run()
    assert not at.error
    assert at.selectbox(key="ddpsim_source").value == "upload: mine.json"
    assert len(at.image) == 1
    # Another file of the same name (run.json from another folder) is kept beside the first, not over it.
    first = at.session_state["ddpsim_uploads"]["upload: mine.json"]
    at.file_uploader[0].set_value(("mine.json", (FIXTURES / "tiny_trace.json").read_bytes()[:-1] + b" }",
                                   "application/json")).run()
    assert not at.error and at.selectbox(key="ddpsim_source").value == "upload: mine.json (2)"
    assert at.session_state["ddpsim_uploads"]["upload: mine.json"] is first
    assert {"upload: mine.json", "upload: mine.json (2)"} <= set(at.selectbox(key="ddpsim_source").options)


def test_a_failed_uploads_error_goes_once_another_trace_is_chosen(monkeypatch):
    # "Still showing the previous trace" stayed on every page after the user chose another one
    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    at = open_app()
    at.file_uploader[0].set_value(("empty.json", b"", "application/json")).run()
    assert len(at.error) == 1 and "empty.json is empty" in at.error[0].value
    chooser = at.selectbox(key="ddpsim_source")
    other = next(o for o in chooser.options if o != chooser.value)
    chooser.set_value(other).run()
    assert not at.exception and not at.error and at.selectbox(key="ddpsim_source").value == other


def test_accept_upload_takes_bytes():
    def script(fixture_path):
        from pathlib import Path

        import streamlit as st

        from ddpsim.app import state

        st.session_state["result_bad"] = state.accept_upload("x.json", b"not json at all")
        st.session_state["result_big"] = state.accept_upload("big.json", b" " * (50 * 2**20 + 1))
        st.session_state["result_ok"] = state.accept_upload(
            "ok.json", Path(fixture_path).read_bytes())

    at = AppTest.from_function(script, default_timeout=60,
                               args=(str(FIXTURES / "tiny_trace.json"),))
    at.run()
    assert not at.exception
    assert "x.json is not valid JSON" in at.session_state["result_bad"]
    assert "the limit is 50 MB" in at.session_state["result_big"]
    assert at.session_state["result_ok"] is None
    assert at.session_state["ddpsim_source"] == "upload: ok.json"
    assert len(at.error) == 2


def test_no_samples_still_opens(monkeypatch, tmp_path):
    monkeypatch.setenv(samples.ENV_VAR, str(tmp_path))
    at = open_app()
    assert not at.image
    assert any("Upload a trace" in i.value for i in at.info)


def test_opens_on_bundled_sample(monkeypatch):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    names = samples.list_samples()
    assert names, "no bundled sample traces in ddpsim/samples/*.json"
    at = open_app()
    assert at.selectbox(key="ddpsim_source").value == names[0]
    assert len(at.image) == 1 and len(at.metric) == 3


def test_samples_helper(monkeypatch, tmp_path):
    monkeypatch.setenv(samples.ENV_VAR, str(FIXTURES))
    assert samples.list_samples() == ["tiny_trace"]
    assert samples.sample_path("tiny_trace") == FIXTURES / "tiny_trace.json"
    assert samples.sample_path("tiny_trace.json") == FIXTURES / "tiny_trace.json"
    for bad in ("nope", "../fixtures/tiny_trace"):
        with pytest.raises(ValueError, match="no sample trace named"):
            samples.sample_path(bad)
    monkeypatch.setenv(samples.ENV_VAR, str(tmp_path / "missing"))
    assert samples.list_samples() == []


def test_a_change_that_rounds_to_nothing_reads_as_none():
    # the metric badges read "-0 pts" and "↑ 0.0 ms"
    from ddpsim.app import ui

    assert ui.delta_text("{:.0%}", -0.001) == ("0 pts", True)
    assert ui.delta_text("{:.1f} ms", 0.04) == ("0.0 ms", True)
    assert ui.delta_text("{:.1f} ms", -0.06) == ("-0.1 ms", False)
