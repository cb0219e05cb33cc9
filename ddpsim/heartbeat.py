"""Heartbeats: where each rank is, readable by the launcher while the rank runs.

Each rank launched by ddpsim writes its progress into a small memory-mapped file
(``DDPSIM_HEARTBEAT`` in its environment): the stage of the run, the iteration,
the phase (forward, backward, optimizer) and the last bucket whose allreduce it
launched. A write is a few bytes stored into shared memory: no system call, so
it costs nothing measurable on the autograd thread. The launcher reads the files
while it polls the ranks; when no rank has moved for the collective timeout it
names the rank that is furthest behind and what the others are waiting in.

Note [Name the rank that is stuck]: a rank that hangs (SIGSTOP, a model that
blocks in forward) fails nothing by itself; the ranks that *wait* for it are the
ones whose collective times out. So the error that reaches the launcher first
blames a healthy rank. Like torch's flight recorder and desync debug, we compare
what each rank was doing: the rank that did not join the collective the others
are in is the one that stopped. Under torchrun there is no launcher and no heartbeat.

Note [Stopped inside a collective]: "launched" is counted when DDP hands a bucket to the
communication hook, before the backend has exchanged anything. A rank stopped after that
(SIGSTOP freezes gloo's threads with it) has launched as many buckets as the ranks waiting for
it, so progress alone cannot tell them apart: the kernel's "stopped" state names it, and the
line says it is inside the allreduce rather than that it did not join one. Seen under load
(`pytest -n 4` on two cores), where the signal lands between the launch and the exchange.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass

ENV = "DDPSIM_HEARTBEAT"
STAGES = ("starting python", "joining the process group", "building the model",
          "wrapping the model in DDP", "aligning clocks", "training", "measuring hook costs", "finishing",
          "out of data")  # measuring hook costs: record/hookprobe.py, after the last iteration
PHASES = ("forward", "backward", "optimizer", "done", "Join's shadow")  # the last: a joined rank (record/joined.py)
FORWARD = ("a collective it did not join (DDP's forward has collectives too: the bucket rebuild, the buffer "
           "broadcast)")  # what blame says a rank waits in when it launched no bucket in its step
_FORMAT = "<8q"  # seq, stage, iteration, phase, buckets launched, last bucket, beat time (ns), pid
SIZE = struct.calcsize(_FORMAT)

_mm: mmap.mmap | None = None
_state = [0, 0, -1, 0, 0, -1, 0, 0]


def open_writer() -> None:
    """Map this rank's heartbeat file, if the launcher asked for one (no-op otherwise)."""
    global _mm
    path = os.environ.get(ENV)
    if not path or _mm is not None:
        return
    with open(path, "r+b") as f:
        _mm = mmap.mmap(f.fileno(), SIZE)
    _state[7] = os.getpid()


def beat(stage: str | None = None, iteration: int | None = None, phase: str | None = None,
         bucket: int | None = None) -> None:
    """Record progress. ``bucket``: an allreduce of this bucket was launched."""
    if _mm is None:
        return
    s = _state
    if stage is not None:
        s[1] = STAGES.index(stage)
    if iteration is not None:
        s[2], s[4], s[5] = iteration, 0, -1
    if phase is not None:
        s[3] = PHASES.index(phase)
    if bucket is not None:
        s[4], s[5] = s[4] + 1, bucket
    s[0] += 1
    s[6] = time.monotonic_ns()
    struct.pack_into(_FORMAT, _mm, 0, *s)


@dataclass
class Beat:
    """One rank's last heartbeat, as the launcher reads it."""

    rank: int
    seq: int = 0
    stage: int = 0
    iteration: int = -1
    phase: int = 0
    launched: int = 0
    bucket: int = -1

    def progress(self) -> tuple:
        """Orders ranks by how far they got (a rank in a later stage or step is further)."""
        training = self.stage == STAGES.index("training")
        return (self.stage, self.iteration if training else -1, self.phase if training else 0,
                self.launched if training else 0)

    def doing(self) -> str:
        """What the rank was doing: 'in backward of iteration 3' or 'while joining the process group'."""
        if self.stage != STAGES.index("training") or self.iteration < 0:
            return f"while {STAGES[self.stage]}"
        if PHASES[self.phase] == "done":
            return f"just after iteration {self.iteration}"
        return f"in {PHASES[self.phase]} of iteration {self.iteration}"

    def collective(self) -> str | None:
        """The collective this rank is in or waits on, if it launched one this iteration."""
        if self.stage == STAGES.index("training") and self.bucket >= 0:
            return f"allreduce of bucket {self.bucket} (iteration {self.iteration})"
        if self.stage == STAGES.index("joining the process group"):
            return "the process group's rendezvous"
        if self.stage in (STAGES.index("aligning clocks"), STAGES.index("finishing")):
            return "a barrier"
        if self.stage == STAGES.index("measuring hook costs"):
            return "an allreduce of the hook probe (record/hookprobe.py)"
        if self.stage == STAGES.index("wrapping the model in DDP"):
            return "DDP's broadcast of the parameters (its constructor)"
        return None


STARTING = "Starting the ranks (importing torch takes a few seconds)..."  # before any rank's first heartbeat


def starting_line(beats: list[Beat]) -> str | None:
    """What the ranks are doing before every one of them trains (the app's progress line, where no
    iteration is recorded yet): ``STARTING`` before any has beaten, then the stage of the rank furthest
    behind; None once all are training (their first iteration is being recorded)."""
    started = [b for b in beats if b.seq > 0]
    if not started:
        return STARTING
    behind = min(beats, key=lambda b: (b.seq > 0, b.progress(), b.rank))
    if behind.seq > 0 and behind.stage >= STAGES.index("training"):
        return None
    doing = "has not started yet" if behind.seq == 0 else f"is {STAGES[behind.stage]}"
    return f"Starting the ranks ({len(started)} of {len(beats)} started): rank {behind.rank} {doing}..."


def create(path) -> None:
    """The launcher makes each rank's (zeroed) heartbeat file before starting it."""
    with open(path, "wb") as f:
        f.write(b"\0" * SIZE)


def read(path, rank: int) -> Beat:
    try:
        with open(path, "rb") as f:
            data = f.read(SIZE)
    except OSError:
        return Beat(rank)
    if len(data) < SIZE:
        return Beat(rank)
    seq, stage, iteration, phase, launched, bucket, _, _ = struct.unpack(_FORMAT, data)
    if not (0 <= stage < len(STAGES) and 0 <= phase < len(PHASES)):
        return Beat(rank)  # torn or foreign bytes: treat as not started
    return Beat(rank, seq, stage, iteration, phase, launched, bucket)


def out_of_data(beats: list[Beat], done: Beat) -> tuple[int, str]:
    """Note [A rank out of data]: with uneven inputs the rank that runs out of batches leaves its
    training loop while the others start another iteration, whose allreduces it never joins:
    they wait until the collective timeout (the hang users meet most with DDP). Its heartbeat is
    furthest along, so the rule for a stopped rank would blame one of the waiting ranks."""
    others = [b for b in beats if b.rank != done.rank and STAGES[b.stage] == "training"]
    line = f"ran out of data after iteration {done.iteration}"
    if others:
        ahead = max(others, key=lambda b: b.progress())
        waiting = ahead.collective() or f"DDP's collectives ({ahead.doing()})"
        who = ", ".join(str(b.rank) for b in others)
        line += (f" while rank(s) {who} went on to iteration {ahead.iteration}: they wait in {waiting}, which "
                 f"rank {done.rank} never joins")
    line += ("; uneven inputs: give every rank the same number of batches, or wrap the training loop in "
             "`with model.join():` (torch.distributed.algorithms.Join)")
    return done.rank, line


def blame(beats: list[Beat], stopped: set[int] = frozenset()) -> tuple[int, str]:
    """(rank, one line): the rank that stopped making progress and what it did not join.

    The rank furthest behind is the one the others wait for; among equals, a
    process the kernel reports as stopped (SIGSTOP) is named first. A rank that ran out of
    data comes before both (Note [A rank out of data]).
    """
    if (out := [b for b in beats if STAGES[b.stage] == "out of data"]):
        return out_of_data(beats, min(out, key=lambda b: (b.iteration, b.rank)))
    behind = min(beats, key=lambda b: (b.progress(), b.rank not in stopped, b.rank))
    ahead = max(beats, key=lambda b: b.progress())
    line = f"stopped {behind.doing()}"
    if behind.rank in stopped:
        line += " (its process is stopped, e.g. by SIGSTOP)"
    waited = ahead.collective()
    if ahead.progress() > behind.progress():
        others = [b.rank for b in beats if b.progress() == ahead.progress()]
        who = "rank " + str(others[0]) if len(others) == 1 else "ranks " + ", ".join(map(str, others))
        if waited:
            line += f": did not join {waited}, which {who} {'is' if len(others) == 1 else 'are'} waiting in"
        elif PHASES[ahead.phase] == "forward":  # e.g. stopped in iteration 0's optimizer, before the rebuild
            line += f": {who} went on and wait{'s' if len(others) == 1 else ''} {ahead.doing()}, in {FORWARD}"
    elif len(beats) > 1 and ahead.progress() == behind.progress():
        others = ", ".join(str(b.rank) for b in beats if b.rank != behind.rank)
        if waited and PHASES[behind.phase] == "backward":
            # Note [Stopped inside a collective]: every rank launched the same buckets, so the
            # one that stopped did join; it stopped before its part of the allreduce was done.
            line += f": inside {waited}, the last collective it launched, which rank(s) {others} wait in"
        else:
            line += f": rank(s) {others} wait in the same step, in {FORWARD}"
    return behind.rank, line
