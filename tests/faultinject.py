"""Fault injection into real recordings: SIGKILL or SIGSTOP one rank, then check the launcher.

    result = trial(tmp_dir, "SIGSTOP", "training", seed=3, timeout_s=10)

Starts ``python -m ddpsim record`` (real ranks, real gloo), finds its rank
processes (``rank_processes``), signals a random one during start-up (before any iteration) or during
training, and measures what the issue asks of the launcher: the rank named in
its one-line error, every process gone within timeout + 5 s of the fault, the
partial trace kept and marked. Used by tests/test_record_hangs.py (a few trials)
and benchmarks/bench_faults.py (20 trials for the report).
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from childenv import child_env  # noqa: E402
from ddpsim.proctree import alive, descendants, stat  # noqa: E402


# Note [Fault tests run unpinned]: `record` used to pin local rank r to CPU r % cpus in every recording,
# so recordings running at once put their rank 0 on the same core. On a 16-core GPU box with 12 test
# workers, rank 0 of a 3-rank recording was starved inside DDP's constructor past the 8 s collective
# timeout, and the run was blamed on it (docs/gpu.md). Recordings now reserve different CPUs (Note
# [Recordings share the machine's CPUs] in ddpsim/record/cpus.py), but the fault tests check what the
# launcher says and how soon everything ends, not timings, so their ranks still go unpinned.
UNPINNED = False


@dataclass
class Result:
    signal: str
    when: str  # "start-up" or "training": where the rank really was when signalled
    victim: int
    named: int | None  # the rank the error names
    seconds_to_gone: float  # fault -> launcher and every rank process gone
    launcher_rc: int | None
    message: str
    trace_kept: bool
    victim_marked: str | None  # the victim's error in the kept trace
    leftover: list[int]
    iterations_kept: int = 0  # iterations in the kept trace, all ranks: none, and it keeps each rank's fate

    def ok(self, timeout_s: float) -> bool:
        return (self.named == self.victim and self.seconds_to_gone <= timeout_s + 5
                and self.trace_kept and bool(self.victim_marked) and not self.leftover)


def parent_of(pid: int) -> int | None:
    s = stat(pid)
    return None if s is None else s[1]


def rank_of(pid: int) -> int | None:
    """The rank a process is: its name for a forked rank (record/forked.py names it), RANK in the
    environment the launcher started it with for a started one; None for anything else."""
    try:
        name = Path(f"/proc/{pid}/comm").read_text().strip()
        if name.startswith("ddpsim rank "):
            return int(name.split()[-1])
        env = set(Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"))
        if b"DDPSIM_LAUNCHED=1" in env:
            return next((int(item[5:]) for item in env if item.startswith(b"RANK=")), None)
    except (OSError, ValueError):
        pass
    return None


def rank_processes(root: int) -> dict[int, int]:
    """rank -> pid of the rank processes below ``root`` (a launcher, or this process); the first
    found of each rank (descendants() lists parents before their children)."""
    found: dict[int, int] = {}
    for pid in descendants(root):
        if (r := rank_of(pid)) is not None:
            found.setdefault(r, pid)
    return found


def alive_after(pids, seconds: float) -> list[int]:
    """Those of ``pids`` still alive once ``seconds`` have passed or all are gone, whichever first."""
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def shard_iterations(out: Path, rank: int) -> int:
    """Iterations rank ``rank`` has written to its shard of ``out`` so far (0 before it exists)."""
    try:
        return Path(out).with_name(f"{Path(out).name}.rank{rank}.jsonl").read_bytes().count(b'"kind":"iteration"')
    except OSError:
        return 0


def iterations_written(out: Path, world: int) -> int:
    return sum(shard_iterations(out, r) for r in range(world))


class FaultClock(threading.Thread):
    """Notes when rank ``rank``'s shard of ``out`` first holds ``count`` iterations: the moment of a
    fault that stops that rank there (it ran out of data, blocks in the next forward, or fails in
    the next batch). A window timed from then leaves out the ranks' start-up, which a loaded
    machine stretches.

        with FaultClock(out, rank=2, count=3) as clock:
            record(cfg, out)                # in the main thread: the launcher handles signals
        clock.seconds_since_fault()         # None if the rank never got that far
    """

    def __init__(self, out: Path, rank: int, count: int):
        super().__init__(daemon=True)
        self.out, self.rank, self.count, self.fault, self.ended = out, rank, count, None, None
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set() and self.fault is None:
            if shard_iterations(self.out, self.rank) >= self.count:
                self.fault = time.monotonic()
            self._done.wait(0.01)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.ended = time.monotonic()
        self._done.set()
        self.join()
        if self.fault is None and shard_iterations(self.out, self.rank) >= self.count:
            self.fault = self.ended  # the run ended within one look of the fault

    def seconds_since_fault(self) -> float | None:
        return None if self.fault is None else self.ended - self.fault


def trial(workdir, sig: str, when: str, seed: int, timeout_s: float = 10.0, world_size: int = 2,
          model: str = "mlp", pin_cpus: bool = UNPINNED) -> Result:
    """One recording with one rank signalled; see the module docstring. ``pin_cpus``: unpinned for
    the tests (Note [Fault tests run unpinned]), pinned as users run it for the benchmark."""
    rng = random.Random(seed)
    out = Path(workdir) / f"run-{sig}-{when}-{seed}.json"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "ddpsim", "record", "--model", model, "--world-size", str(world_size),
         "--iters", "100000", "--timeout", str(timeout_s), "--out", str(out), *([] if pin_cpus else ["--no-pin-cpus"])],
        cwd=ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    ranks: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 60
        while len(ranks) < world_size and time.monotonic() < deadline and launcher.poll() is None:
            ranks = rank_processes(launcher.pid)
            time.sleep(0.01)
        if len(ranks) < world_size:  # seen on an H200 box (docs/gpu.md): say what the launcher did
            launcher.kill()
            out_, err_ = launcher.communicate(timeout=30)
            raise AssertionError(f"found rank processes {sorted(ranks)} of {world_size}; launcher "
                                 f"exit {launcher.returncode}: {(err_ or out_).strip()[-500:]!r}")
        victim = rng.randrange(world_size)
        if when == "start-up":
            # a forked rank has torch already (ddpsim/record/forked.py): this lands while it sets up,
            # joins the process group, builds or wraps the model; `really` says where it landed
            time.sleep(rng.uniform(0.0, 0.3))
        else:
            target = rng.randint(2, 20)
            while iterations_written(out, world_size) < target and time.monotonic() < deadline:
                time.sleep(0.005)
        really = "training" if iterations_written(out, world_size) else "start-up"
        os.kill(ranks[victim], getattr(signal, sig))
        fault = time.monotonic()
        try:
            _, stderr = launcher.communicate(timeout=timeout_s + 30)
        except subprocess.TimeoutExpired:
            stderr = "(launcher did not exit)"
        while any(alive(p) for p in ranks.values()) and time.monotonic() - fault < timeout_s + 30:
            time.sleep(0.01)
        gone = time.monotonic() - fault
        leftover = [p for p in ranks.values() if alive(p)]
    finally:
        _cleanup(launcher, ranks)
    message = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    found = re.search(r"error: rank (\d+)", message)
    kept, marked, iterations = out.exists(), None, 0
    if kept:
        from ddpsim import load_trace

        trace = load_trace(out)
        kept = not trace.complete
        marked = next((r.error for r in trace.ranks if r.rank == victim), None)
        iterations = sum(len(r.iterations) for r in trace.ranks)
    return Result(sig, really, victim, int(found.group(1)) if found else None, gone, launcher.returncode,
                  message, kept, marked, leftover, iterations)


def _cleanup(launcher, ranks) -> None:
    for pid in [launcher.pid, *ranks.values()]:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    launcher.wait()
