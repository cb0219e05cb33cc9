"""The real app under streamlit's AppTest, opened with traces already uploaded (shared by the tests)."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def with_uploads(uploads: dict, page: str, source: str | None = None):
    """The app on ``page`` (a file in ddpsim/app/pages) with ``uploads`` (label -> Trace) in the
    session and ``source`` (one of them) open."""
    at = AppTest.from_file(APP, default_timeout=90)
    at.session_state["ddpsim_uploads"] = uploads
    at.session_state["ddpsim_trace_ids"] = {k: i for i, k in enumerate(uploads)}
    at.session_state["ddpsim_trace_counter"] = len(uploads)
    if source is not None:
        at.session_state["ddpsim_source"] = source
    at.run()
    return at.switch_page(f"ddpsim/app/pages/{page}").run()


def compare_page(uploads: dict):
    """The Compare page with ``uploads`` (label -> Trace) in the session and all of them picked."""
    at = with_uploads(uploads, "compare.py")
    at.multiselect(key="ddpsim_compare_runs").set_value(list(uploads)).run()
    return at


WAITING = ("Run the sweep", "Simulate every world size")  # the What-if page's long work, when it waits


def run_waiting(at):
    """Click the What-if page's long work that waits for its button, so that a test sees its results
    either way: whether it waits is the page's guess of its time here (``SWEEP_ASK_S``), which the
    machine's load moves (a fresh-clone CI run beside another test run saw the curve wait)."""
    for label in WAITING:
        if (ask := [b for b in at.button if b.label.startswith(label)]):
            ask[0].click().run()
    return at
