"""The dashboard with hostile uploads and ddpsim's own partial traces: one line each, every page keeps working."""
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ddpsim import samples

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
APP = str(ROOT / "app.py")
PAGES = "ddpsim/app/pages/"


@pytest.fixture(autouse=True)
def fixture_samples(monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(FIXTURES))


def upload(at, name, data):
    return at.file_uploader[0].set_value((name, data, "application/json")).run()


def no_exception(at):
    assert not at.exception, [e.message for e in at.exception]


@pytest.mark.parametrize("name, data, expected", [
    ("nested.json", b"[" * 5000 + b"]" * 5000, "nests JSON 5000 levels deep"),
    ("digits.json", b'{"format":"ddpsim-trace","version":' + b"1" * 4300 + b"}", "4300-digit integer"),
    ("bool.json", b'{"format":"ddpsim-trace","version":true}', "version True"),
    ("quotes.json", b'{"meta": {"model": "' + b'\\"' * 40_000, "is truncated"),  # was quadratic: 13 s
])
def test_hostile_upload_is_one_error_and_pages_keep_working(name, data, expected):
    at = AppTest.from_file(APP, default_timeout=60).run()
    upload(at, name, data)
    no_exception(at)
    assert len(at.error) == 1 and expected in at.error[0].value
    assert at.selectbox(key="ddpsim_source").value == "tiny_trace"
    for page in ("buckets.py", "compare.py", "timeline.py"):
        at.switch_page(PAGES + page).run()
        no_exception(at)


def partial_trace() -> bytes:
    raw = json.loads((FIXTURES / "tiny_trace.json").read_text())
    for r in raw["ranks"]:
        r.update(iterations=[], layouts=[], complete=False, error="hung: stopped while starting python")
    return json.dumps(raw).encode()


def test_partial_trace_shows_a_plain_note_on_every_page():
    at = AppTest.from_file(APP, default_timeout=60).run()
    upload(at, "stopped.json", partial_trace())
    no_exception(at)
    assert at.selectbox(key="ddpsim_source").value == "upload: stopped.json"
    assert any("no iteration to show" in w.value for w in at.warning), [w.value for w in at.warning]
    for page in ("buckets.py", "compare.py", "whatif.py"):
        at.switch_page(PAGES + page).run()
        no_exception(at)
    at.switch_page(PAGES + "compare.py").run()
    at.multiselect(key="ddpsim_compare_runs").set_value(["tiny_trace", "upload: stopped.json"]).run()
    no_exception(at)
    assert any("left out" in w.value for w in at.warning), [w.value for w in at.warning]


def test_a_recording_without_some_of_its_ranks_says_so():
    """A real trace whose meta says 2 ranks but that holds rank 0 only (an edited or half-copied file) opened
    as if complete; a simulated trace keeps some of its ranks by design and says nothing."""
    raw = json.loads((FIXTURES / "tiny_trace.json").read_text())
    raw["source"], raw["ranks"] = "real", raw["ranks"][:1]
    at = AppTest.from_file(APP, default_timeout=60).run()
    upload(at, "one_rank.json", json.dumps(raw).encode())
    no_exception(at)
    assert any("holds 1 of its 2 ranks (no rank 1)" in w.value for w in at.warning), [w.value for w in at.warning]
    raw["meta"]["ranks_included"] = [0]
    upload(at, "kept.json", json.dumps(raw).encode())
    assert at.selectbox(key="ddpsim_source").value == "upload: kept.json"
    assert not any("holds 1 of" in w.value for w in at.warning)


def test_a_hang_shows_the_launchers_diagnosis_not_only_the_peers_crash():
    """A rank that ran out of data finishes (complete) with the launcher's diagnosis as its error; the rank left
    waiting dies of gloo's "Connection closed by peer". The page showed only the latter, stack and all."""
    raw = json.loads((FIXTURES / "tiny_trace.json").read_text())
    raw["ranks"][0].update(complete=False, error="RuntimeError: Connection closed by peer [127.0.0.1]:25318. "
                           "GLHF!\n\nAt:\n  ddpsim/record/instrument.py(139): done")
    raw["ranks"][1].update(complete=True, error="hung: ran out of data after iteration 1 while rank(s) 0 went on")
    at = AppTest.from_file(APP, default_timeout=60).run()
    upload(at, "uneven.json", json.dumps(raw).encode())
    no_exception(at)
    note = next(w.value for w in at.warning if w.value.startswith("Partial trace"))
    assert "rank 1 (hung: ran out of data after iteration 1" in note and "Connection closed by peer" in note
    assert "At:" not in note and "instrument.py" not in note
    at.switch_page(PAGES + "whatif.py").run()  # the What-if replays a partial run: it says so too
    no_exception(at)
    assert any(w.value.startswith("Partial trace") and "ran out of data" in w.value for w in at.warning)


def test_an_upload_past_the_time_limit_is_given_up_in_one_line(monkeypatch):
    """The upload is read in a child process stopped at UPLOAD_PARSE_S (60 s; here set tiny)."""
    from ddpsim.app import state

    monkeypatch.setattr(state, "UPLOAD_PARSE_S", 0.0001)
    at = AppTest.from_file(APP, default_timeout=60).run()
    upload(at, "slow.json", (FIXTURES / "tiny_trace.json").read_bytes() + b" " * 20_000_000)
    no_exception(at)
    assert len(at.error) == 1 and "slow.json took more than 0.0001 s to read and was given up" in at.error[0].value
    assert at.selectbox(key="ddpsim_source").value == "tiny_trace"
