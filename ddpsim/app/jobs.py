"""Recordings started from the app: one process group per recording, never a shell.

``start(cfg)`` runs ``python -m ddpsim.app.record_job`` from a fixed argument list in
a new session, so ``stop(job)`` ends it and all its ranks with one signal to the
group. Every live job is also stopped when the app's process exits (atexit), and a
job stops itself if the app dies without exiting cleanly (record_job watches its parent).
No Streamlit here, and no torch: the app process never imports it.
"""
from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpsim.heartbeat import STARTING  # the Record page's line until a rank's first heartbeat (torch-free)


GRACE_S = 5.0  # SIGTERM -> SIGKILL
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
RUNS_ENV = "DDPSIM_RUNS_DIR"

_live: list["Job"] = []
_lock = threading.Lock()


@dataclass
class Job:
    cfg: dict  # RecordConfig fields (the child builds and validates the RecordConfig)
    out: Path
    status_path: Path
    proc: subprocess.Popen = field(repr=False)
    started: float = field(default_factory=time.monotonic)
    stopped: bool = False  # ``stop`` ended it: what the user asked for, not a failure

    @property
    def pid(self) -> int:
        return self.proc.pid


def runs_dir(create: bool = True) -> Path:
    """Where the app's recordings go: $DDPSIM_RUNS_DIR, else ddpsim-runs in the temporary folder."""
    d = os.environ.get(RUNS_ENV)
    path = (Path(d).expanduser() if d else Path(tempfile.gettempdir()) / "ddpsim-runs").absolute()
    if create:
        path.mkdir(parents=True, exist_ok=True)
    return path


def kept_recordings() -> list[tuple[Path, bool]]:
    """The traces the app's recordings left in ``runs_dir()``, oldest first, each with whether it is
    partial: a finished recording's, and what a failed or stopped one recorded before it ended (its
    ranks write as they go). The app keeps them on disk so that they can be opened again where the
    session that made them is gone: a reload, another tab, a restarted server."""
    found = []
    try:
        statuses = list(runs_dir(create=False).glob("*/status.json"))
    except OSError:  # unreadable: nothing to offer, and the pages go on
        return []
    for status in statuses:
        try:
            said = json.loads(status.read_text())
            state = said.get("state")
        except (OSError, ValueError, AttributeError):  # being replaced, or not ours
            continue
        if state in ("done", "failed", "stopped"):  # a failed or stopped one: where its partial trace holds an iteration
            found += [(p, state != "done") for p in status.parent.glob("*.json")
                      if p.name != status.name and (state == "done" or said.get("kept", _size(p) > 0))]
    return sorted(found, key=lambda kept: _mtime(kept[0]))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mtime(path: Path) -> int:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def start(cfg: dict, name: str) -> Job:
    """Start recording ``cfg`` (RecordConfig fields) into runs_dir()/name.json; returns at once.

    The configuration is checked in the child, so the app never imports torch; a bad
    one comes back as a failed status with the reason.
    """
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=runs_dir()))
    out, status = folder / f"{name}.json", folder / "status.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p))
    with open(folder / "job.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ddpsim.app.record_job", json.dumps(cfg), str(out),
                                 str(status)], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=folder)
    job = Job(cfg, out, status, proc)
    with _lock:
        _live.append(job)
    return job


def poll(job: Job) -> dict:
    """{"state": starting|running|done|failed|stopped, "done", "total", "error", "stage"}."""
    try:
        status = json.loads(job.status_path.read_text())
    except (OSError, ValueError):
        status = {"state": "starting", "done": 0, "total": job.cfg.get("iters", 0), "error": None}
    code = job.proc.poll()
    if code is not None:
        _forget(job)
        if status.get("state") in ("starting", "running") and job.stopped:  # stopped before it could say so
            status = {**status, "state": "stopped", "kept": job.out.is_file()}
        elif status.get("state") in ("starting", "running"):
            tail = _log_tail(job)
            status = {**status, "state": "failed",
                      "error": f"the recording process exited with status {code}" + (f": {tail}" if tail else "")}
    return status


def wait(job: Job, progress=None, poll_s: float = 0.25, extra_s: float = 120.0) -> dict:
    """Poll ``job`` until it is done, failed or stopped; ``progress(done, total, stage)`` while it runs
    (stage: what its ranks do before an iteration is recorded, else None).

    A job still going ``extra_s`` after its own timeout is stopped and reported failed.
    """
    deadline = time.monotonic() + job.cfg["timeout_s"] + extra_s
    while True:
        status = poll(job)
        if status["state"] in ("done", "failed", "stopped"):
            return status
        if time.monotonic() > deadline:
            stop(job)
            return {**status, "state": "failed", "error": "the recording took too long and was stopped"}
        if status["state"] == "running" and progress is not None:
            progress(status.get("done", 0), max(1, status.get("total") or job.cfg["iters"]), status.get("stage"))
        time.sleep(poll_s)


def progress_text(done: int, total: int, stage: str | None = None) -> str:
    """The Record page's progress line; before the first iteration is recorded, what the ranks do
    (``stage``: importing torch and starting the ranks can take most of a short run); once every iteration
    is in, what the recording still does (so a Stop there is not taken for one mid-run)."""
    if done == 0 and stage:
        return stage
    if done < total:
        return f"Recording: {done}/{total} iterations"
    return (f"All {total} iterations recorded; finishing: timing what a comm hook would cost in these ranks "
            "and merging their files (a few seconds)...")


def iterations(n: int) -> str:
    """``n`` iterations in words: "1 iteration", "6 iterations"."""
    return f"{n} iteration{'s' * (n != 1)}"


def _log_tail(job: Job) -> str:
    try:
        lines = (job.status_path.parent / "job.log").read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1] if lines else ""


def stop(job: Job) -> None:
    """End the job and every rank in its process group (SIGTERM, then SIGKILL)."""
    job.stopped = True
    _signal_group(job, signal.SIGTERM)
    try:
        job.proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _signal_group(job, signal.SIGKILL)  # ranks that outlived the launcher, if any
    try:
        job.proc.wait(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    _wait_group_gone(job)
    _forget(job)


def _wait_group_gone(job: Job) -> None:
    """Wait (up to GRACE_S) until no process of the job's group is left: the launcher's wait returns
    while a killed rank may still be exiting (fresh-clone CI saw one alive right after ``stop``)."""
    deadline = time.monotonic() + GRACE_S
    while time.monotonic() < deadline:
        try:
            os.killpg(job.proc.pid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.05)


def _signal_group(job: Job, sig: int) -> None:
    try:
        os.killpg(job.proc.pid, sig)  # the job leads its own session/group
    except (ProcessLookupError, PermissionError):
        pass


def _forget(job: Job) -> None:
    with _lock:
        if job in _live:
            _live.remove(job)


def live() -> list[Job]:
    with _lock:
        return list(_live)


@atexit.register
def stop_all() -> None:
    """Stop every job still running (called when the app's process exits)."""
    for job in live():
        stop(job)
