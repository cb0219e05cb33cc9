"""What a recording that failed or was stopped keeps, and the one line that says why.

The ranks write their shards as they go (``merge.py``), so a recording that ends early still has
what it recorded: the launcher merges the shards into the output, marked incomplete, names the
rank that caused the failure (``explain.py``; Note [Name the rank that is stuck] in heartbeat.py)
and says where the partial trace is. An output file that already holds a trace is not replaced
by a partial one that holds no iteration: nothing recorded must not cost an earlier recording.
"""
from __future__ import annotations

import signal
from pathlib import Path

from ddpsim import heartbeat
from ddpsim.errors import CLIError
from ddpsim.record.explain import SIGNALLED, explain, is_secondary, root_cause
from ddpsim.record.merge import empty_shard, merge, read_shard
from ddpsim.trace.writer import write_trace_dict

HUNG = -1  # the exit code the launcher's watch gives a rank that made no progress for the collective timeout


class RecordError(CLIError):
    """A recording that failed; the message is one plain line, the partial trace is kept."""

    def __init__(self, message: str, trace_path: Path | None = None):
        super().__init__(message)
        self.trace_path = trace_path


def failure(cfg, out: Path, shards: list[Path], logs: Path, failed: dict[int, int],
            beats: list[heartbeat.Beat], stopped: set[int]) -> RecordError:
    """Keep what was recorded (marked incomplete) and name the rank that caused the failure."""
    errors, params, read = {}, [], []
    for r, s in enumerate(shards):
        shard = read_or_stub(s, r)
        read.append(shard)
        params = params or shard["header"].get("params", [])
        if shard["error"]:
            errors[r] = shard["error"]
    for r, code in failed.items():
        if r not in errors and code != HUNG:
            errors[r] = _exit_reason(code, logs / f"rank{r}.log")
    hang = HUNG in failed.values() or (errors and all(is_secondary(e) for e in errors.values()))
    if hang:  # Note [Name the rank that is stuck]
        rank, line = heartbeat.blame(beats, stopped)
        errors[rank] = f"hung: {line}"
        message = f"rank {rank} {line}"
    why = f"stopped by the launcher while waiting for rank {rank}" if hang else \
        "stopped by the launcher after another rank failed"
    notes = {r: why for r in range(cfg.world_size) if r not in errors}
    raw = merge(read, notes={**notes, **errors})
    if not any(s.exists() for s in shards):
        raw["meta"]["note"] = "no rank recorded anything: the run stopped during start-up"
    kept = keep(raw, out)
    if not hang:
        rank, error = root_cause(errors)
        message = explain(rank, error, params)
    where = f"partial trace kept in {out}" if kept else f"no iteration recorded; {out} left as it was"
    return RecordError(f"{message} ({where}; rank logs in {logs})", out if kept else None)


def interrupted(cfg, out: Path, shards: list[Path], logs: Path) -> str | None:
    """After Ctrl-C or SIGTERM (the ranks already stopped): merge what they recorded into ``out``,
    marked incomplete; one line saying where, or None when there was nothing to keep."""
    read = [read_or_stub(s, r) for r, s in enumerate(shards)]
    raw = merge(read, notes={r: "stopped: the recording was interrupted" for r in range(cfg.world_size)})
    if not keep(raw, out):
        return None
    return f"partial trace kept in {out} (rank logs in {logs})"


def keep(raw: dict, out: Path) -> bool:
    """Write the partial trace ``raw`` to ``out`` unless it holds no iteration and ``out`` exists."""
    if not any(r["iterations"] for r in raw["ranks"]) and out.exists():
        return False
    write_trace_dict(raw, out)
    return True


def read_or_stub(path: Path, rank: int) -> dict:
    """A rank's shard, or an empty one for a rank that wrote nothing (stopped during start-up)."""
    try:
        if path.exists() and path.stat().st_size > 0:
            return read_shard(path)
    except CLIError:  # killed while writing its header line
        pass
    return empty_shard(path, rank)


def _exit_reason(code: int, log: Path) -> str:
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
    if code < 0:
        return f"{SIGNALLED} {signal.Signals(-code).name}" + (f"; last output: {tail[0]}" if tail else "")
    return tail[0] if tail else f"exited with status {code}"
