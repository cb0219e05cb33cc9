"""Start N ranks on this machine, watch them, and merge what they recorded.

A small torchrun: each rank is ``python -m ddpsim.record.worker`` with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its environment, started from a fixed
argument list (never a shell). The launcher polls the ranks instead of waiting
on any one of them, so when one rank fails the others, which would otherwise
block in a collective until the timeout, are stopped at once (ddp-internals.md:
a launcher that waits on a queue hangs forever when a rank segfaults).
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from ddpsim.errors import CLIError
from ddpsim.record.config import RecordConfig
from ddpsim.record.explain import explain, root_cause
from ddpsim.record.merge import merge_files, read_shard

POLL_S = 0.1  # seconds between looks at the ranks
GRACE_S = 3.0  # seconds between SIGTERM and SIGKILL when stopping ranks
HANG_MARGIN_S = 30.0  # no progress for timeout + this many seconds -> stop the run


class RecordError(CLIError):
    """A recording that failed; the message is one plain line, the partial trace is kept."""

    def __init__(self, message: str, trace_path: Path | None = None):
        super().__init__(message)
        self.trace_path = trace_path


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def pick_port(preferred: int | None = None) -> int:
    """``preferred`` if it is free, otherwise a free port chosen by the OS."""
    if preferred and port_is_free(preferred):
        return preferred
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shard_paths(out: Path, world_size: int) -> list[Path]:
    return [out.with_name(f"{out.name}.rank{r}.jsonl") for r in range(world_size)]


PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])  # the folder that holds ddpsim/


def _start(cfg: RecordConfig, rank: int, port: int, shard: Path, log: Path) -> subprocess.Popen:
    path = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, RANK=str(rank), WORLD_SIZE=str(cfg.world_size), LOCAL_RANK=str(rank),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1", DDPSIM_LAUNCHED="1")
    with open(log, "w") as f:
        return subprocess.Popen([sys.executable, "-m", "ddpsim.record.worker", cfg.to_json(), str(shard)],
                                env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every live rank, then SIGKILL what is left after GRACE_S; reap them all."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _iterations_done(shard: Path) -> int:
    try:
        return shard.read_bytes().count(b'"kind":"iteration"')
    except OSError:
        return 0


def _watch(procs, cfg: RecordConfig, shard0: Path, progress) -> dict[int, int]:
    """Poll until all ranks exit or one fails; returns rank -> exit code of those that failed."""
    last_done, last_change = -1, time.monotonic()
    while True:
        codes = [p.poll() for p in procs]
        failed = {r: c for r, c in enumerate(codes) if c not in (None, 0)}
        if failed or all(c == 0 for c in codes):
            return failed
        done = _iterations_done(shard0)
        if done != last_done:
            last_done, last_change = done, time.monotonic()
            if progress:
                progress(done, cfg.iters)
        elif time.monotonic() - last_change > cfg.timeout_s + HANG_MARGIN_S:
            return {r: -1 for r, c in enumerate(codes) if c is None}
        time.sleep(POLL_S)


def record(cfg: RecordConfig, out: str | Path, progress: Callable[[int, int], None] | None = None,
           master_port: int | None = None):
    """Record one run into ``out``; returns the Trace, or raises RecordError (partial trace kept)."""
    cfg.validate()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    logs = out.with_name(out.name + ".logs")
    logs.mkdir(exist_ok=True)
    shards = shard_paths(out, cfg.world_size)
    port = pick_port(master_port)
    procs = []
    try:
        for r, shard in enumerate(shards):
            procs.append(_start(cfg, r, port, shard, logs / f"rank{r}.log"))
        failed = _watch(procs, cfg, shards[0], progress)
    finally:
        stop_all(procs)  # ranks left running after a failure, Ctrl-C or a bug here
    if not failed:
        trace = merge_files(shards, out)
        for s in shards:
            s.unlink()
        shutil.rmtree(logs, ignore_errors=True)
        if progress:
            progress(cfg.iters, cfg.iters)
        return trace
    raise _failure(cfg, out, shards, logs, failed)


def _failure(cfg, out: Path, shards: list[Path], logs: Path, failed: dict[int, int]) -> RecordError:
    """Keep what was recorded (marked incomplete) and name the rank that caused the failure."""
    errors, params = {}, []
    present = [s for s in shards if s.exists() and s.stat().st_size > 0]
    for s in present:
        shard = read_shard(s)
        params = params or shard["header"].get("params", [])
        if shard["error"]:
            errors[shard["header"]["rank"]] = shard["error"]
    for r, code in failed.items():
        if r not in errors:
            errors[r] = _exit_reason(code, logs / f"rank{r}.log")
    notes = {r: "stopped by the launcher after another rank failed" for r in range(cfg.world_size)
             if r not in errors}
    kept = None
    if present:
        merge_files(present, out, notes={**notes, **errors})
        kept = out
    rank, error = root_cause(errors)
    where = f" (partial trace kept in {out}; rank logs in {logs})" if kept else f" (rank logs in {logs})"
    return RecordError(explain(rank, error, params) + where, kept)


def _exit_reason(code: int, log: Path) -> str:
    if code == -1:
        return "made no progress for longer than the collective timeout (hung?)"
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
    if code < 0:
        return f"died from signal {signal.Signals(-code).name}" + (f"; last output: {tail[0]}" if tail else "")
    return tail[0] if tail else f"exited with status {code}"
