"""What a recording that failed or was stopped keeps, and the one line that says why.

The ranks write their shards as they go (``merge.py``), so a recording that ends early still has
what it recorded: the launcher merges the shards into the output, marked incomplete, names the
rank that caused the failure (``explain.py``; Note [Name the rank that is stuck] in heartbeat.py)
and says where the partial trace is. An output file that already holds a trace is not replaced
by a partial one: the partial trace goes beside it as NAME.partial.json (and one that holds no
iteration is not written there at all): a run that ended early must not cost an earlier recording.
"""
from __future__ import annotations

import signal
from pathlib import Path

from ddpsim import heartbeat
from ddpsim.errors import CLIError
from ddpsim.record.explain import SIGNALLED, explain, is_secondary, powersgd_on_gloo, root_cause
from ddpsim.record.merge import empty_shard, merge, read_shard
from ddpsim.trace.writer import write_trace_dict

HUNG = -1  # the exit code the launcher's watch gives a rank that made no progress for the collective timeout


class RecordError(CLIError):
    """A recording that failed; the message is one plain line, the partial trace is kept."""

    def __init__(self, message: str, trace_path: Path | None = None, iterations: int = 0):
        super().__init__(message)
        self.trace_path = trace_path  # where the partial trace was written (None: nowhere)
        self.iterations = iterations  # how many rank-iterations it holds


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
    kept = keep(raw, out, empty_too=True)  # an empty one still names each rank's fate
    if not hang:
        rank, error = root_cause(errors)
        message = explain(rank, error, params)
    if (advice := powersgd_on_gloo(cfg, errors, hang)):
        message = message.rstrip(".") + advice
    where = (f"partial trace kept in {kept}" if kept and _iterations(raw) else
             f"no iteration recorded; each rank's fate kept in {kept}" if kept else
             f"no iteration recorded; {out} left as it was")
    return RecordError(f"{message} ({where}; {_raw(shards)}rank logs in {logs})", kept, _iterations(raw))


def interrupted(cfg, outs: list[Path], shards: list[list[Path]], logs: Path) -> str | None:
    """After Ctrl-C or SIGTERM (the ranks already stopped): merge what each config's ranks recorded
    into its output, marked incomplete; one line saying where, or None when nothing was recorded."""
    kept = []
    for out, rank_shards in zip(outs, shards):
        read = [read_or_stub(s, r) for r, s in enumerate(rank_shards)]
        raw = merge(read, notes={r: "stopped: the recording was interrupted" for r in range(cfg.world_size)})
        if (path := keep(raw, out)) is not None:
            kept.append(str(path))
    raw = _raw([s for rank_shards in shards for s in rank_shards])
    return f"partial trace kept in {', '.join(kept)} ({raw}rank logs in {logs})" if kept else None


def _raw(shards: list[Path]) -> str:
    """The raw shards left beside the trace, named for the message ("" where none was written)."""
    left = sorted({str(s.with_name(s.name.rsplit(".rank", 1)[0] + ".rank*.jsonl")) for s in shards if s.exists()})
    return f"raw shards in {', '.join(left)}; " if left else ""


def keep(raw: dict, out: Path, empty_too: bool = False) -> Path | None:
    """Write the partial trace ``raw`` where it takes nothing from the user (``out``, or beside an
    existing file as NAME.partial.json); where it went, or None when it holds no iteration and
    ``empty_too`` is off or ``out`` exists."""
    if not _iterations(raw) and (not empty_too or out.exists()):
        return None
    path = out.with_name(f"{out.name.removesuffix('.json')}.partial.json") if out.exists() else out
    write_trace_dict(raw, path)
    return path


def _iterations(raw: dict) -> int:
    return sum(len(r["iterations"]) for r in raw["ranks"])


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
