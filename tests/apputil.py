"""The real app under streamlit's AppTest, opened with traces already uploaded (shared by the tests)."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

APP = str(Path(__file__).resolve().parents[1] / "app.py")


def compare_page(uploads: dict):
    """The Compare page with ``uploads`` (label -> Trace) in the session and all of them picked."""
    at = AppTest.from_file(APP, default_timeout=90)
    at.session_state["ddpsim_uploads"] = uploads
    at.session_state["ddpsim_trace_ids"] = {k: i for i, k in enumerate(uploads)}
    at.session_state["ddpsim_trace_counter"] = len(uploads)
    at.run()
    at.switch_page("ddpsim/app/pages/compare.py").run()
    at.multiselect(key="ddpsim_compare_runs").set_value(list(uploads)).run()
    return at
