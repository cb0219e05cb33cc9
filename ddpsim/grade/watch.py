"""Where each part 2 rank is, for the grader to say so when a run hangs or a rank dies.

Note [A stuck rank says where]: ``run_ranks`` stops a hung run by killing every rank, so a
rank cannot report at the end. Instead ``start`` (run_ranks' ``setup``, in the rank before
torch) starts a ``Watch``: a daemon thread that, every ``POLL_S``, writes what changed of the
rank's phase and step (set by the harness), the student's innermost line in the main thread's
stack, and the harness's probe stamps of the iteration (gradients ready, allreduces launched and
finished) to ``FOLDER/rankN.progress``. Nothing is written from the hooks: the graded timings stay
the harness's own. After a timeout, ``describe_stuck`` reads those files: which rank was stuck in
which step and phase, at which line of the student's file, and on which bucket of DDP's layout
(an allreduce launched and never finished, or the first bucket never launched, with the
gradients it lacked).

``start`` also sends the rank's stderr (file descriptor 2) to ``FOLDER/rankN.stderr``: what a dying
rank prints there (gloo's C++ abort message) no longer lands above the grader's report. The
grader names it in one line (``last_words``), and ``rank_logs`` hands the whole text to
``ddpsim.grade`` to print after the report.
"""
from __future__ import annotations

import json
import linecache
import os
import re
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.5
_current = None


class Watch:
    """A rank's progress, written to ``path`` by a daemon thread when it changes."""

    def __init__(self, path: str | None = None):
        self.path, self.phase, self.step = path, "starting", None
        self.probe = self.student = None
        self.layout: dict = {}

    def attach(self, probe, buckets, numels, student: str) -> None:
        self.probe, self.student = probe, str(Path(student).resolve())
        self.layout = {"buckets": buckets, "numels": numels}

    def at(self, phase: str, step: int | None = None) -> None:
        self.phase, self.step = phase, step

    def snapshot(self) -> dict:
        it = getattr(self.probe, "current", None)
        return {"phase": self.phase, "step": self.step, "where": self._where(), **self.layout,
                "grads": sorted(i for _, i in list(it.grads)) if it else [],
                "collectives": [(c.numel, c.end is not None) for c in list(it.collectives)] if it else []}

    def _where(self) -> list | None:
        """(file name, line, function, source) of the student's innermost frame in the main thread."""
        frame = sys._current_frames().get(threading.main_thread().ident)
        while frame is not None:
            code = frame.f_code
            if self.student and os.path.abspath(code.co_filename) == self.student:
                source = linecache.getline(code.co_filename, frame.f_lineno).split("  #")[0].strip()
                return [Path(code.co_filename).name, frame.f_lineno, code.co_name, source[:70]]
            frame = frame.f_back
        return None

    def run(self) -> None:
        last = None
        while True:
            try:
                now = self.snapshot()
                if now != last:
                    tmp = f"{self.path}.tmp"
                    Path(tmp).write_text(json.dumps(now))
                    os.replace(tmp, self.path)
                    last = now
            except Exception:  # noqa: BLE001 - a stamp changing under us: try again next time
                pass
            time.sleep(POLL_S)


def start(folder: str, rank: int) -> None:
    """In a rank, before torch: stderr to ``folder/rankN.stderr``, progress to ``folder/rankN.progress``."""
    global _current
    os.makedirs(folder, exist_ok=True)
    fd = os.open(os.path.join(folder, f"rank{rank}.stderr"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    _current = Watch(os.path.join(folder, f"rank{rank}.progress"))
    threading.Thread(target=_current.run, name="ddpsim grade watch", daemon=True).start()


def current() -> Watch:
    """This rank's Watch; one that writes nothing where ``start`` did not run."""
    return _current or Watch()


# -- the grader's side ----------------------------------------------------------------------------
def describe_stuck(folder: str | Path, world: int) -> str:
    """One line: each rank's phase, step, line and bucket, from its last progress file."""
    said = [_rank_stuck(folder, rank) for rank in range(world)]
    if all(s is None for s in said):
        return ""
    said = [s or "never got to the harness (stuck starting?)" for s in said]
    if len(set(said)) == 1 and world > 1:  # the same on every rank: said once
        return f"ranks {', '.join(map(str, range(world - 1)))} and {world - 1} each {said[0]}"
    return "; ".join(f"rank {rank} {s}" for rank, s in enumerate(said))


def _rank_stuck(folder: str | Path, rank: int) -> str | None:
    try:
        p = json.loads((Path(folder) / f"rank{rank}.progress").read_text())
    except (OSError, ValueError):
        return None
    flying = _in_flight(p)
    if p["phase"] == "done":
        return "finished its steps" + (f" but not {flying}" if flying else " and waited for the other rank")
    step = f"step {p['step']}'s " if p.get("step") is not None else ""
    where = p.get("where")
    at = f" at {where[0]}:{where[1]} ({where[2]}: {where[3]})" if where else ""
    bucket = (f": waiting for {flying}" if flying else _never_launched(p)) if p["phase"] == "backward" else ""
    return f"stuck in {step}{p['phase']}{at}{bucket}"


def _launched(p: dict) -> dict:
    """bucket index (None: a size of no bucket) -> whether its allreduce finished, this iteration."""
    buckets, numels = p.get("buckets") or [], p.get("numels") or []
    by_size = {sum(numels[i] for i in b): k for k, b in enumerate(buckets)}
    return {by_size.get(n): done for n, done in p.get("collectives", [])}


def _in_flight(p: dict) -> str:
    flying = [k for k, done in _launched(p).items() if k is not None and not done]
    return (f"bucket {min(flying)}'s allreduce (launched, never finished: did the other rank launch it, "
            "in the same order?)") if flying else ""


def _never_launched(p: dict) -> str:
    """": bucket k of n never launched, ..." for the first bucket not launched, with the gradients it lacked."""
    buckets, launched, ready = p.get("buckets") or [], _launched(p), set(p.get("grads", []))
    for k, b in enumerate(buckets):
        if k not in launched:
            lacking = [i for i in b if i not in ready]
            why = (f"parameter(s) {lacking} had no gradient" if lacking
                   else f"though all its gradients ({b}) were ready")
            return f": bucket {k} of {len(buckets)} never launched, {why}"
    return ""


def last_words(folder: str | Path, rank: int) -> str:
    """What a rank printed on stderr, in one line: a C++ abort's ``what()``, else its last line."""
    try:
        text = (Path(folder) / f"rank{rank}.stderr").read_text(errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    what = next((line for line in reversed(lines) if line.startswith("what():")), None)
    if what:
        thrown = next((re.sub(r".*instance of ", "", line) for line in lines if "instance of" in line), "")
        what = re.sub(r"enforce fail at \S*/([^/\s]+:\d+)", r"\1", what.removeprefix("what():").strip())
        return _cut(f"{thrown.strip(chr(39))}: {what}" if thrown else what)
    return _cut(lines[-1]) if lines else ""


def _cut(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[:limit - 3].rstrip() + "..."


def rank_logs(folder: Path) -> list[tuple[str, str]]:
    """(label, text) of every non-empty ``*.stderr`` under ``folder``, for after the report."""
    out = []
    for f in sorted(Path(folder).rglob("*.stderr")):
        text = f.read_text(errors="replace")
        if text.strip():
            out.append((str(f.relative_to(folder).with_suffix("")), text))
    return out
