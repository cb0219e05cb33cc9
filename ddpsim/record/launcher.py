"""Start N ranks on this machine, watch them, and merge what they recorded.

A small torchrun: each rank is ``python -m ddpsim.record.worker`` with RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT in its environment, started from a fixed
argument list (never a shell). The launcher polls the ranks instead of waiting
on any one of them, so when one rank fails the others, which would otherwise
block in a collective until the timeout, are stopped at once (ddp-internals.md:
a launcher that waits on a queue hangs forever when a rank segfaults).
"""
from __future__ import annotations

import json
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
from ddpsim.record.merge import first_forward_ns, merge_files, read_shard

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


def _start(cfgs: list[RecordConfig], rank: int, port: int, shards: list[Path], log: Path) -> subprocess.Popen:
    path = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, PYTHONPATH=path, RANK=str(rank), WORLD_SIZE=str(cfgs[0].world_size), LOCAL_RANK=str(rank),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1", DDPSIM_LAUNCHED="1")
    with open(log, "w") as f:
        configs = json.dumps([c.to_dict() for c in cfgs])
        return subprocess.Popen([sys.executable, "-m", "ddpsim.record.worker", configs, *map(str, shards)],
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
    return record_many([cfg], [out], progress, master_port)[0]


def record_many(cfgs: list[RecordConfig], outs: list[str | Path],
                progress: Callable[[int, int], None] | None = None, master_port: int | None = None):
    """Record several configurations in the same ranks, interleaved iteration by iteration.

    All configs share the world size, backend and pinning; each gets its own DDP
    instance and its own trace in ``outs``. Interleaving makes their timings
    comparable: a slow spell of the machine hits them all alike (``validate --grid``).
    """
    for cfg in cfgs:
        cfg.validate()
    shared = {(c.world_size, c.backend, c.pin_cpus, c.timeout_s) for c in cfgs}
    if len(shared) != 1:
        raise CLIError("configs recorded together must share world size, backend, pinning and timeout")
    cfg, outs = cfgs[0], [Path(o) for o in outs]
    outs[0].parent.mkdir(parents=True, exist_ok=True)
    logs = outs[0].with_name(outs[0].name + ".logs")
    logs.mkdir(exist_ok=True)
    shards = [shard_paths(o, cfg.world_size) for o in outs]  # [config][rank]
    port = pick_port(master_port)
    procs = []
    watched = max(cfgs, key=lambda c: c.iters)
    try:
        for r in range(cfg.world_size):
            procs.append(_start(cfgs, r, port, [s[r] for s in shards], logs / f"rank{r}.log"))
        failed = _watch(procs, watched, shards[cfgs.index(watched)][0], progress)
    finally:
        stop_all(procs)  # ranks left running after a failure, Ctrl-C or a bug here
    if failed:
        raise _failure(cfg, outs[0], shards[0], logs, failed)
    origin = min(first_forward_ns([read_shard(p) for p in rank_shards]) for rank_shards in shards)
    traces = []
    for out, rank_shards in zip(outs, shards):
        traces.append(merge_files(rank_shards, out, origin_ns=origin))
        for s in rank_shards:
            s.unlink()
    shutil.rmtree(logs, ignore_errors=True)
    if progress:
        progress(watched.iters, watched.iters)
    return traces


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
