"""The app's shared state: which trace is open, from a bundled sample, an upload or the session.

``sidebar()`` runs in ``app.py`` on every page; pages call ``current_trace()``.
Session keys (all prefixed ``ddpsim_``):
  ddpsim_source    the selectbox value: a sample name, "upload: <file name>",
                   "recorded: <...>" or "simulated: <...>"
  ddpsim_uploads   {label: Trace} for traces made in this session (uploads that
                   parsed, recordings, simulated runs kept from the What-if page)
  ddpsim_upload    (file_id, error or None) of the last upload seen
  ddpsim_pending_source  a session trace to open on the next run (set after the chooser is drawn)
  ddpsim_saved     {label: Path} of the recordings the app's other sessions finished
                   (``jobs.kept_recordings``, partial ones too): they stay in the chooser after a reload
  ddpsim_own_runs  the files of the recordings this session made (among ddpsim_uploads)
  ddpsim_wi_networks  {trace_key: calibration}: the allreduces the What-if page measured for a trace
  ddpsim_last_kept  the run the What-if page kept last; ddpsim_last_kept_with: (its unchanged configuration kept
                   beside it, the trace it came from or None): the Compare page opens with them
  ddpsim_wi...     the What-if page's widgets, kept while another page is shown (``keep_widgets``)
"""
from __future__ import annotations

import uuid
from pathlib import Path

import streamlit as st
from streamlit.errors import StreamlitAPIException

from ddpsim.app.labels import chooser_name, full_name_note
from ddpsim.samples import list_samples, sample_path
from ddpsim.trace import Trace, TraceFormatError, load_trace
from ddpsim.trace.timed_read import parse_trace_within

MAX_UPLOAD_MB = 50
UPLOAD_PARSE_S = 60.0  # seconds an upload may take to read (a valid 46 MB trace takes about 4 s here)
UPLOAD_PREFIX = "upload: "
RECORDED_PREFIX = "recorded: "
PARTIAL_PREFIX = "recorded (partial): "  # what a failed or stopped recording kept
SIMULATED_PREFIX = "simulated: "
MEASURED = "ddpsim_wi_networks"  # session key: {trace_key: calibration} measured on the What-if page
SWEPT = "ddpsim_swept"  # session key: the What-if sweeps run this session (their cache keys), shown again at once
WHATIF = "ddpsim_wi"  # the start of the What-if page's widget keys (``keep_widgets``)
WHATIF_BUTTONS = ("keep", "measure", "sweep", "scaling")  # the ends of its button keys: Streamlit refuses a button's value assigned
QUERY = "trace"  # the address's ?trace=: the open trace, so that a reload reopens it (samples, saved recordings)


@st.cache_data(show_spinner="Loading the trace...", max_entries=32)
def load_sample(path: str, mtime_ns: int) -> Trace:
    """Load a sample or saved recording's trace file (cached; mtime_ns makes a rewritten file reload)."""
    return load_trace(path)


def add_trace(label: str, trace: Trace, select: bool = True) -> str:
    """Keep ``trace`` in this session under ``label`` (and open it if ``select``)."""
    st.session_state.setdefault("ddpsim_uploads", {})[label] = trace
    # unique across sessions: the caches keyed on it (figures, simulations) are the whole server's
    st.session_state.setdefault("ddpsim_trace_ids", {})[label] = uuid.uuid4().hex
    if select:
        _select(label)
    return label


def keep_trace(label: str, trace: Trace, key: str) -> str:
    """Keep a simulated run under ``label`` without opening it. ``key`` says what was simulated (the
    source, its measured network, the configuration): a run already kept keeps its name (a what-if left
    unchanged is its reference, kept beside an earlier what-if); another run already kept under that name
    (the same choices before a network was measured) stays, and this one gets ``label (2)``."""
    keys = st.session_state.setdefault("ddpsim_kept_keys", {})
    same = next((name for name, k in keys.items() if k == key), None)
    if same in st.session_state.get("ddpsim_uploads", {}):
        return same
    if label in st.session_state.get("ddpsim_uploads", {}) and keys.get(label) != key:
        label = same or free_label(label)
    keys[label] = key
    return add_trace(label, trace, select=False)


def _select(label: str) -> None:
    try:
        st.session_state["ddpsim_source"] = label
    except StreamlitAPIException:  # the chooser is already drawn: select it on the next run
        st.session_state["ddpsim_pending_source"] = label


def saved_recordings() -> dict[str, Path]:
    """The recordings the app's other sessions made (before a reload, in another tab, before a
    restart), finished or partial, by chooser label; looked for on every run, each keeping its
    label. A recording this session made is among its own traces (``open_recording``)."""
    from ddpsim.app import jobs  # noqa: PLC0415 (imported where needed: no Streamlit there)

    saved = st.session_state.setdefault("ddpsim_saved", {})
    found = jobs.kept_recordings()
    present = {path for path, _partial in found}
    for label in [label for label, path in saved.items() if path not in present]:
        del saved[label]  # its file is gone
    known = set(saved.values()) | st.session_state.get("ddpsim_own_runs", set())
    taken = set(list_samples()) | set(saved) | set(st.session_state.get("ddpsim_uploads", {}))
    for path, partial in found:
        if path in known:
            continue
        prefix = PARTIAL_PREFIX if partial else RECORDED_PREFIX
        label, k = prefix + path.stem, 2
        while label in taken:
            label, k = f"{prefix}{path.stem} ({k})", k + 1
        saved[label] = path
        taken.add(label)
    return saved


def open_recording(path: Path, trace: Trace, prefix: str = RECORDED_PREFIX) -> str:
    """Open the recording this session's Record page made at ``path``; its label. One label per
    file: the chooser may list it already, found in the runs folder while the page was away."""
    for label, saved in st.session_state.get("ddpsim_saved", {}).items():
        if saved == Path(path):
            _select(label)
            return label
    st.session_state.setdefault("ddpsim_own_runs", set()).add(Path(path))
    return add_trace(free_label(f"{prefix}{Path(path).stem}"), trace)


def free_label(label: str) -> str:
    """``label``, or ``label (2)``, ``(3)``... when a trace of this session or a sample already has it:
    a second recording of the same options, or a second file called run.json, is kept beside the first."""
    taken = set(all_labels())
    k = 2
    free = label
    while free in taken:
        free, k = f"{label} ({k})", k + 1
    return free


def open_partial(path: Path) -> str | None:
    """The partial trace a failed or stopped recording kept at ``path``, opened as
    'recorded (partial): NAME'; None when there is none or it holds no iteration."""
    try:
        trace = load_trace(path) if Path(path).is_file() else None
    except (TraceFormatError, OSError):
        return None
    if trace is None or not any(r.iterations for r in trace.ranks):
        return None
    return open_recording(path, trace, PARTIAL_PREFIX)


def accept_upload(name: str, data: bytes) -> str | None:
    """Parse an uploaded trace and select it; on failure show one st.error line.

    Returns None when the trace opened, else the error message shown. On failure
    the previously selected trace stays open, so the app keeps working.
    """
    try:
        if len(data) > MAX_UPLOAD_MB * 1024 * 1024:
            raise TraceFormatError(f"{name} is {len(data) / 2**20:.0f} MB; the limit is {MAX_UPLOAD_MB} MB")
        # JSON only: nothing in an upload is executed; a child process, given up after UPLOAD_PARSE_S
        trace = parse_trace_within(data, UPLOAD_PARSE_S, name=name, max_bytes=MAX_UPLOAD_MB * 1024 * 1024)
    except TraceFormatError as e:
        message = f"Could not open the upload: {str(e).splitlines()[0]}. Still showing the previous trace."
        st.error(message, icon="⚠️")
        return message
    add_trace(free_label(UPLOAD_PREFIX + name), trace)
    return None


def sidebar() -> None:
    """Draw the trace chooser, the uploader and the downloads in the sidebar."""
    with st.sidebar:
        chooser = st.container()
        upload = st.file_uploader(
            "Or upload your own trace", type=["json", "gz"], max_upload_size=MAX_UPLOAD_MB,
            help="A ddpsim trace JSON, .json or .json.gz (up to 50 MB, and 50 MB once decompressed), e.g. one "
                 "written by `python -m ddpsim record` or `python -m ddpsim import` (which turns "
                 "PyTorch-profiler traces into one).")
        downloads = st.container()
    _handle_upload(upload)  # before the selectbox exists, so it may select the upload
    saved_recordings()  # the runs folder, read once per run (all_labels reads what this found)
    options = all_labels()
    if not options:
        chooser.info("No bundled sample traces were found. Upload a trace to begin.")
        return
    pending = st.session_state.pop("ddpsim_pending_source", None)
    if pending in options:
        st.session_state["ddpsim_source"] = pending
    asked = st.query_params.get(QUERY)
    if "ddpsim_source" not in st.session_state and asked:  # a reload, or a link: reopen its trace
        if asked in options:
            st.session_state["ddpsim_source"] = asked
        else:  # an upload or a session's simulation lasts as long as its session; a file may be gone
            chooser.caption(f"“{asked}” in the address is not open in this session (an upload or a "
                            "simulated run lasts as long as its session): showing another trace.")
    if st.session_state.get("ddpsim_source") not in options:
        st.session_state["ddpsim_source"] = options[0]
    chooser.selectbox("Trace", options, key="ddpsim_source", format_func=chooser_name,
                      help="Bundled recordings (real, 2-core CPU) and simulated GPU runs, the recordings made on "
                           "the Record page, and traces you uploaded or kept in this session. A long name is cut "
                           "here: the open trace's full name is written below.")
    if (full := full_name_note(st.session_state["ddpsim_source"])):
        chooser.caption(f"Open: {full}")
    st.query_params[QUERY] = st.session_state["ddpsim_source"]  # in the address: a reload, a link
    opened = current_trace(quiet=True)
    if opened:
        from ddpsim.app import ui  # noqa: PLC0415 (ui imports this module)

        label, trace = opened  # the measurement is read now: a download is made on click, outside this run
        measured = st.session_state.get(MEASURED) or {}
        calibration = measured.get(trace_key(label)) if measured else None  # no trace_key (a file stat) without one
        ui.trace_downloads(downloads, label, trace, as_dict=lambda: download_dict(trace, calibration))


def all_labels() -> list[str]:
    return (list_samples() + list(st.session_state.get("ddpsim_saved", {}))
            + list(st.session_state.get("ddpsim_uploads", {})))


def _handle_upload(upload) -> None:
    """Parse a new upload once; re-show its error on reruns while it stays in the uploader and the trace
    it left open is still the one chosen (its "Still showing the previous trace" is wrong after another)."""
    if upload is None:
        st.session_state.pop("ddpsim_upload", None)
        return
    seen, chosen = st.session_state.get("ddpsim_upload"), st.session_state.get("ddpsim_source")
    if seen and seen[0] == upload.file_id:
        if seen[1] and seen[2] == chosen:
            st.error(seen[1], icon="⚠️")
        return
    st.session_state["ddpsim_upload"] = (upload.file_id, accept_upload(upload.name, upload.getvalue()), chosen)


def get_trace(label: str, quiet: bool = False) -> Trace | None:
    """The trace called ``label`` (a sample or a session trace), or None."""
    session = st.session_state.get("ddpsim_uploads", {})
    if label in session:
        return session[label]
    try:
        path = _file_of(label)
        return load_sample(str(path), path.stat().st_mtime_ns)
    except (ValueError, OSError) as e:  # TraceFormatError is a ValueError
        if not quiet:
            st.error(f"Could not open {label}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
        return None


def _file_of(label: str) -> Path:
    """The file of a saved recording or of a bundled sample (ValueError: neither)."""
    saved = st.session_state.get("ddpsim_saved", {})
    return saved[label] if label in saved else sample_path(label)


def trace_key(label: str) -> str:
    """A string that changes whenever the trace behind ``label`` changes (a cache key)."""
    ids = st.session_state.get("ddpsim_trace_ids", {})
    if label in ids:
        return f"session:{label}:{ids[label]}"
    try:
        path = _file_of(label)
        return f"file:{path}:{path.stat().st_mtime_ns}"
    except (ValueError, OSError):
        return f"missing:{label}"


def download_dict(trace: Trace, measured: dict | None) -> dict:
    """The open trace as the sidebar downloads it: with ``measured``, the allreduces the What-if page
    measured for it (``meta.calibration``; the page's copy of a cached sample is not this one), so that the
    page's command line (``app/command.py``) reproduces the page on the downloaded file."""
    d = trace.to_dict()
    return d if measured is None else {**d, "meta": {**d["meta"], "calibration": measured}}


def keep_widgets(prefix: str = WHATIF, buttons: tuple[str, ...] = WHATIF_BUTTONS) -> None:
    """Keep the values of the widgets whose keys start with ``prefix`` while their page is not drawn:
    Streamlit drops a widget's value on a run that does not draw it, so leaving the What-if page (or
    switching its "Start from") reset every choice; assigning the value back keeps it (Streamlit's
    "widget state across pages"). A button's value cannot be assigned: keys ending in ``buttons`` are left;
    a None value (the hook selector's "none") is left too, and comes back as the widget's default."""
    for key in [k for k in st.session_state if str(k).startswith(prefix) and not str(k).endswith(buttons)]:
        if st.session_state[key] is not None:  # a selectbox assigned None shows no choice, not its None option
            st.session_state[key] = st.session_state[key]


def require_trace(iterations: bool = True) -> tuple[str, Trace]:
    """(label, trace) of the open trace, with its simulated/CPU note; stops the page if none.

    iterations: also stop (with a warning saying why) when the trace recorded no iteration.
    """
    from ddpsim.app import ui

    opened = current_trace()
    if opened is None:
        st.info("Choose a bundled sample or upload a trace in the sidebar.")
        st.stop()
    ui.simulated_badge(opened[1])
    ui.partial_note(opened[1])
    if iterations and not ui.has_iterations(opened[1]):
        st.stop()
    return opened


def current_trace(quiet: bool = False) -> tuple[str, Trace] | None:
    """(label, trace) of the open trace, or None when there is none."""
    source = st.session_state.get("ddpsim_source")
    if source is None:
        return None
    trace = get_trace(source, quiet=quiet)
    return (source, trace) if trace is not None else None
