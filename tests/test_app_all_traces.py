"""Every dashboard page opens every trace a learner can meet, with no exception and no error.

The traces: every bundled sample (real, minddp, simulated GPU runs) plus partial ones
made here from a bundled recording: a run stopped after iteration 1 on one rank, and a
run that recorded no iteration at all (both as the recorder writes them when a rank
dies: ``complete: false`` with an ``error``). One AppTest per trace walks all pages in
one session, as a learner clicking through the sidebar would.
"""
import json
import shutil
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ddpsim import samples

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = ("timeline.py", "buckets.py", "compare.py", "whatif.py", "record.py", "learn.py")
PARTIAL = ("90_partial_stopped_after_it1", "91_partial_no_iterations")


def _bundled() -> list[str]:
    return sorted(p.stem for p in samples.BUNDLED_DIR.glob("*.json"))


def _partial(folder: Path) -> None:
    base = json.loads((samples.BUNDLED_DIR / "01_mlp_torch_default.json").read_text())
    stopped = json.loads(json.dumps(base))
    r1 = stopped["ranks"][1]
    r1["iterations"] = [it for it in r1["iterations"] if it["iteration"] <= 1]
    r1["complete"], r1["error"] = False, "rank 1 was killed (SIGKILL) after iteration 1"
    (folder / f"{PARTIAL[0]}.json").write_text(json.dumps(stopped))
    empty = json.loads(json.dumps(base))
    for r in empty["ranks"]:
        r["iterations"], r["complete"], r["error"] = [], False, "stopped before iteration 0 finished"
    (folder / f"{PARTIAL[1]}.json").write_text(json.dumps(empty))


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("samples")
    for name in _bundled():
        shutil.copy(samples.BUNDLED_DIR / f"{name}.json", out / f"{name}.json")
    _partial(out)
    return out


def ok(at, where: str):
    assert not at.exception, (where, [e.message for e in at.exception])
    assert not at.error, (where, [e.value for e in at.error])


@pytest.mark.parametrize("name", _bundled() + list(PARTIAL))
def test_every_page_opens_this_trace(name, folder, monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(folder))
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.selectbox(key="ddpsim_source").set_value(name).run()
    ok(at, "sidebar")
    for page in PAGES:
        at.switch_page("ddpsim/app/pages/" + page).run()
        ok(at, page)
        if name in PARTIAL and page in ("timeline.py", "buckets.py"):
            continue  # a partial trace may have nothing to draw; it must say so, not crash
        if page in ("timeline.py", "buckets.py", "compare.py"):
            assert at.image, (page, "no figure", [w.value for w in at.warning])


def test_partial_traces_say_what_is_missing(folder, monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(folder))
    at = AppTest.from_file(APP, default_timeout=120).run()
    at.selectbox(key="ddpsim_source").set_value(PARTIAL[1]).run()
    text = " ".join(str(w.value) for w in list(at.warning) + list(at.info))
    assert "no iteration" in text.lower(), text
