"""The app's shared state: which trace is open, from a bundled sample or an upload.

``sidebar()`` runs in ``app.py`` on every page; pages call ``current_trace()``.
Session keys (all prefixed ``ddpsim_``):
  ddpsim_source    the selectbox value: a sample name or "upload: <file name>"
  ddpsim_uploads   {label: Trace} for uploads that parsed
  ddpsim_upload    (file_id, error or None) of the last upload seen
"""
from __future__ import annotations

import streamlit as st

from ddpsim.samples import list_samples, sample_path
from ddpsim.trace import Trace, TraceFormatError, load_trace, parse_trace

MAX_UPLOAD_MB = 50
UPLOAD_PREFIX = "upload: "


@st.cache_data(show_spinner="Loading the trace...", max_entries=32)
def load_sample(path: str, mtime_ns: int) -> Trace:
    """Load a sample trace file (cached; mtime_ns makes a rewritten file reload)."""
    return load_trace(path)


def accept_upload(name: str, data: bytes) -> str | None:
    """Parse an uploaded trace and select it; on failure show one st.error line.

    Returns None when the trace opened, else the error message shown. On failure
    the previously selected trace stays open, so the app keeps working.
    """
    try:
        if len(data) > MAX_UPLOAD_MB * 1024 * 1024:
            raise TraceFormatError(f"{name} is {len(data) / 2**20:.0f} MB; the limit is {MAX_UPLOAD_MB} MB")
        trace = parse_trace(data, name=name)
    except TraceFormatError as e:
        message = f"Could not open the upload: {str(e).splitlines()[0]}. Still showing the previous trace."
        st.error(message, icon="⚠️")
        return message
    label = UPLOAD_PREFIX + name
    st.session_state.setdefault("ddpsim_uploads", {})[label] = trace
    st.session_state["ddpsim_source"] = label
    return None


def sidebar() -> None:
    """Draw the trace chooser and the uploader in the sidebar (upload errors go in the page)."""
    with st.sidebar:
        chooser = st.container()
        upload = st.file_uploader(
            "Or upload your own trace", type=["json"], max_upload_size=MAX_UPLOAD_MB,
            help="A ddpsim trace JSON (up to 50 MB), e.g. one written by `python -m ddpsim record`.")
    _handle_upload(upload)  # before the selectbox exists, so it may select the upload
    options = list_samples() + list(st.session_state.get("ddpsim_uploads", {}))
    if not options:
        chooser.info("No bundled sample traces were found. Upload a trace to begin.")
        return
    if st.session_state.get("ddpsim_source") not in options:
        st.session_state["ddpsim_source"] = options[0]
    chooser.selectbox("Trace", options, key="ddpsim_source",
                      help="Bundled sample recordings, and any trace you uploaded.")


def _handle_upload(upload) -> None:
    """Parse a new upload once; re-show its error on reruns while it stays in the uploader."""
    if upload is None:
        st.session_state.pop("ddpsim_upload", None)
        return
    seen = st.session_state.get("ddpsim_upload")
    if seen and seen[0] == upload.file_id:
        if seen[1]:
            st.error(seen[1], icon="⚠️")
        return
    st.session_state["ddpsim_upload"] = (upload.file_id, accept_upload(upload.name, upload.getvalue()))


def current_trace() -> tuple[str, Trace] | None:
    """(label, trace) of the open trace, or None when there is none."""
    source = st.session_state.get("ddpsim_source")
    if source is None:
        return None
    if source.startswith(UPLOAD_PREFIX):
        trace = st.session_state.get("ddpsim_uploads", {}).get(source)
        return (source, trace) if trace is not None else None
    try:
        path = sample_path(source)
        return source, load_sample(str(path), path.stat().st_mtime_ns)
    except (ValueError, OSError) as e:  # TraceFormatError is a ValueError
        st.error(f"Could not open the sample {source}: {e}")
        return None
