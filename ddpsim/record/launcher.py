"""Start N ranks on this machine, watch them, and merge what they recorded.

A small torchrun: each rank runs ``ddpsim.record.worker`` with RANK, WORLD_SIZE and
a private FileStore in its environment: forked from a server that imported torch when it
computes on the CPU (``forked.py``), else started as ``python -m ddpsim.record.worker``
from a fixed argument list (never a shell). Nothing listens on the network (Note [No
port on the network] in process.py). The launcher polls the ranks instead of waiting on
any one of them, so when one rank fails the others, which would otherwise block in a
collective until the timeout, are stopped at once (a launcher that waits on a queue
hangs forever when a rank segfaults). It also reads each rank's heartbeat: when a rank
stops making progress for the collective timeout, it names that rank and what it did
not join (Note [Name the rank that is stuck] in heartbeat.py), and ends every process.
"""
from __future__ import annotations

import contextlib
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
from ddpsim import heartbeat, proctree
from ddpsim.ranks import loopback_interface, private_folder
from ddpsim.record import cpus
from ddpsim.record.config import RecordConfig
from ddpsim.record.failure import HUNG, RecordError, failure, interrupted
from ddpsim.record.forked import start_rank, start_server
from ddpsim.record.merge import first_forward_ns, merge_files, read_shard
from ddpsim.record.turns import Turns

__all__ = ["RecordError", "record", "record_many", "shard_paths", "stop_all"]  # RecordError: raised here

POLL_S = 0.1  # seconds between looks at the ranks
GRACE_S = 3.0  # seconds between SIGTERM and SIGKILL when stopping ranks


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


def _start(cfgs: list[RecordConfig], rank: int, port: int, shards: list[Path], log: Path,
           store: Path, beat: Path, extra_env: dict[str, str], fork: bool):
    path = os.pathsep.join(p for p in (PACKAGE_ROOT, os.environ.get("PYTHONPATH")) if p)
    lo = loopback_interface()
    env = dict(os.environ, PYTHONPATH=path, RANK=str(rank), WORLD_SIZE=str(cfgs[0].world_size), LOCAL_RANK=str(rank),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1", DDPSIM_LAUNCHED="1", DDPSIM_STORE=str(store),
               **{heartbeat.ENV: str(beat)}, **extra_env)
    env.setdefault("GLOO_SOCKET_IFNAME", lo)  # gloo's pair sockets on loopback only, unless the user chose
    env.setdefault("NCCL_SOCKET_IFNAME", lo)  # NCCL's bootstrap sockets likewise
    heartbeat.create(beat)
    argv = [json.dumps([c.to_dict() for c in cfgs]), *map(str, shards)]
    with open(log, "w") as f:
        if fork and (forked := start_rank(argv, env, str(log))) is not None:
            return forked
        return subprocess.Popen([sys.executable, "-m", "ddpsim.record.worker", *argv],
                                env=env, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def is_stopped(pid: int) -> bool:
    """True if the kernel reports the process stopped (SIGSTOP, SIGTSTP, a debugger)."""
    s = proctree.stat(pid)
    return s is not None and s[0] in ("T", "t")


def stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every live rank, then SIGKILL what is left after GRACE_S; reap them all.

    A stopped process does not act on SIGTERM until it is continued, so it gets SIGKILL at once.
    """
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL if is_stopped(p.pid) else signal.SIGTERM)
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


class Watch:
    """The launcher's view of the ranks: exit codes, and when each heartbeat last moved."""

    def __init__(self, procs, beats: list[Path], timeout_s: float):
        self.procs, self.paths, self.timeout_s = procs, beats, timeout_s
        now = time.monotonic()
        self.seen = [(0, now)] * len(procs)  # rank -> (heartbeat seq, when it last changed)
        self.latest: list[heartbeat.Beat] = []  # the heartbeats ``hung`` read last (one read per poll)

    def beats(self) -> list[heartbeat.Beat]:
        return [heartbeat.read(p, r) for r, p in enumerate(self.paths)]

    def hung(self, codes) -> bool:
        """True if a live rank has waited the collective timeout for a rank behind it.

        As torch's timeout: a rank ahead of another (in a collective the other has
        not joined) whose heartbeat has not moved for ``timeout_s``; or a stopped
        process (SIGSTOP) that has not moved for as long. Ranks that are all in the
        same long step (a slow forward) are not waiting for anyone, so not hung.
        """
        now, beats = time.monotonic(), self.beats()
        self.latest = beats
        for r, b in enumerate(beats):
            if b.seq != self.seen[r][0]:
                self.seen[r] = (b.seq, now)
        live = [r for r, c in enumerate(codes) if c is None]
        behind = min((beats[r].progress() for r in live), default=None)
        for r in live:
            if now - self.seen[r][1] > self.timeout_s and (
                    beats[r].progress() > behind or is_stopped(self.procs[r].pid)):
                return True
        return False

    def stopped(self) -> set[int]:
        return {r for r, p in enumerate(self.procs) if p.poll() is None and is_stopped(p.pid)}


def _watch(watch: Watch, cfg: RecordConfig, shard0: Path, progress, starting=None) -> dict[int, int]:
    """Poll until all ranks exit, one fails or one hangs; returns rank -> exit code of those that failed.

    A hang gives every live rank the code HUNG. ``starting(line)``: what the ranks do while no iteration
    is recorded yet, each time it changes (``heartbeat.starting_line``; None once they all train).
    """
    last_done, last_line = -1, ""
    while True:
        codes = [p.poll() for p in watch.procs]
        failed = {r: c for r, c in enumerate(codes) if c not in (None, 0)}
        if failed or all(c == 0 for c in codes):
            return failed
        if watch.hung(codes):
            return {r: HUNG for r, c in enumerate(codes) if c is None}
        done = _iterations_done(shard0)
        if done != last_done:
            last_done = done
            if progress:
                progress(done, cfg.iters)
        if starting and done == 0 and (line := heartbeat.starting_line(watch.latest)) != last_line:
            last_line = line
            starting(line)
        time.sleep(POLL_S)


def record(cfg: RecordConfig, out: str | Path, progress: Callable[[int, int], None] | None = None,
           master_port: int | None = None, starting: Callable[[str | None], None] | None = None):
    """Record one run into ``out``; returns the Trace, or raises RecordError (partial trace kept).
    ``progress(done, total)``: iterations recorded; ``starting(line)``: what the ranks do before that (_watch)."""
    return record_many([cfg], [out], progress, master_port, starting=starting)[0]


def record_many(cfgs: list[RecordConfig], outs: list[str | Path],
                progress: Callable[[int, int], None] | None = None, master_port: int | None = None,
                turns: Turns | None = None, starting: Callable[[str | None], None] | None = None):
    """Record several configurations in the same ranks, interleaved iteration by iteration.

    All configs share the world size, backend and pinning; each gets its own DDP
    instance and its own trace in ``outs``. Interleaving makes their timings
    comparable: a slow spell of the machine hits them all alike (``validate --grid``).
    ``turns``: this group's place among groups of other world sizes recorded at the
    same time, round by round (Note [Take turns across world sizes]).
    """
    cfg, outs = _check(cfgs, outs)
    placement = cfg.placement()
    if (fork := placement.device == "cpu"):  # Note [Only CPU ranks are forked] in forked.py
        start_server()  # it imports torch while the ranks' files are set up
    outs[0].parent.mkdir(parents=True, exist_ok=True)
    logs = outs[0].with_name(outs[0].name + ".logs")
    logs.mkdir(exist_ok=True)
    shards = [shard_paths(o, cfg.world_size) for o in outs]  # [config][rank]
    port = pick_port(master_port)
    procs = []
    watched = max(cfgs, key=lambda c: c.iters)
    private = Path(private_folder("rdzv"))  # the FileStore and the heartbeats (a killed launcher's: swept)
    beats = [private / f"rank{r}.heartbeat" for r in range(cfg.world_size)]
    env = {**placement.rank_env(), **(turns.env() if turns else {})}  # Note [CPU ranks see no GPU]
    held = contextlib.ExitStack()  # Note [Recordings share the machine's CPUs] in cpus.py
    try:
        pinned = held.enter_context(cpus.reserved(cfg.world_size)) if fork and cfg.pin_cpus else None
        for r in range(cfg.world_size):
            procs.append(_start(cfgs, r, port, [s[r] for s in shards], logs / f"rank{r}.log", private / "store",
                                beats[r], {**env, cpus.ENV: str(pinned[r]) if pinned else ""}, fork))
        watch = Watch(procs, beats, cfg.timeout_s)
        failed = _watch(watch, watched, shards[cfgs.index(watched)][0], progress, starting)
        if failed:
            last, stopped = watch.beats(), watch.stopped()
    except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, SIGTERM: what was recorded is kept
        stop_all(procs)
        raise (KeyboardInterrupt(kept) if (kept := interrupted(cfg, outs, shards, logs))
               and isinstance(stop, KeyboardInterrupt) else stop) from None
    finally:
        try:
            stop_all(procs)  # ranks left running after a failure, Ctrl-C or a bug here
        finally:
            held.close()  # the CPUs go back once the ranks are stopped
            shutil.rmtree(private, ignore_errors=True)
            if turns:
                turns.end()  # the other groups stop waiting for this one
    if failed:
        raise failure(cfg, outs[0], shards[0], logs, failed, last, stopped)
    traces = _merge_all(outs, shards, logs)
    if progress:
        progress(watched.iters, watched.iters)
    return traces


def _check(cfgs: list[RecordConfig], outs: list[str | Path]) -> tuple[RecordConfig, list[Path]]:
    """(the shared config, the outputs as paths), or CLIError before any rank starts."""
    for cfg in cfgs:
        cfg.validate()
    shared = {(c.world_size, c.backend, c.pin_cpus, c.timeout_s) for c in cfgs}
    if len(shared) != 1:
        raise CLIError("configs recorded together must share world size, backend, pinning and timeout")
    outs = [Path(o) for o in outs]
    if folders := [o for o in outs if o.is_dir()]:
        raise CLIError(f"the output {folders[0]} is a folder: name a trace file, e.g. {folders[0] / 'run.json'}")
    return cfgs[0], outs


def _merge_all(outs: list[Path], shards: list[list[Path]], logs: Path) -> list:
    """Each config's shards merged into its output on one shared time origin; the shards and logs removed."""
    origin = min(first_forward_ns([read_shard(p) for p in rank_shards]) for rank_shards in shards)
    traces = []
    for out, rank_shards in zip(outs, shards):
        traces.append(merge_files(rank_shards, out, origin_ns=origin))
        for s in rank_shards:
            s.unlink()
    shutil.rmtree(logs, ignore_errors=True)
    return traces
