"""Recordings of different world sizes that take turns, round by round, on one machine.

Note [Take turns across world sizes]: ``validate --extrapolate`` learns a model at
2 ranks and predicts 4. Recorded one after the other, the two groups were minutes
apart, and this 2-core machine's speed drifts by more than the accuracy asked in
minutes: the same 24 predictions had a median error of 3.6% in one recording and
9.2% in another, the sign of a model's error flipping between them (2026-11-23).
Runs of one world size already share their ranks and interleave iteration by
iteration (Note [Interleave the measurements] in ``experiments/grid.py``); runs of
different world sizes cannot share ranks. So each world size's group is launched
at once, and the groups take turns: group g runs one round (iteration i of each of
its runs, then its allreduce probe) while every other group's ranks sleep on a
file, then hands the turn to the next group. A slow spell now falls on both world
sizes alike. Nothing of one group runs while another's round does, so a waiting
rank must not take a core from a measured one. It never waits in a gloo collective
(gloo's threads may spin while they wait: Note [Spinning is not work] in
``probe.py``), nor does it poll: a Python loop looking at the turn file every 5 ms
took 7% of a core, and four such ranks at world size 4 made the 2-rank runs they
waited beside 7-14% slower (mlp and shuffled predicted 4-14% high, 2026-11-23). A
waiting rank blocks in ``select`` on a named pipe of its own, and whoever hands a
turn on writes a byte to every rank's pipe.

``experiments.recorder.record_in_turns`` launches the groups (``launcher.record_many``
in a thread each). The launcher starts each group's ranks with ``DDPSIM_TURNS`` (``Turns.env``) in
their environment; ``worker.train`` calls ``take`` before each round and ``hand_on``
after it. Every rank of every group first writes a ready mark, and the first turn
waits for all of them, so no group builds its models while another is measured.
A group that ends (done or failed) is marked ended (``end``) and skipped from then on.
"""
from __future__ import annotations

import json
import os
import select
import time
from pathlib import Path

ENV = "DDPSIM_TURNS"
WAKE_S = 1.0  # seconds a waiting rank sleeps at most between looks at the turn file, should a wake-up be lost
START_WAIT_S = 600.0  # seconds the first turn waits for every group to be ready (models built, clocks aligned)


class TurnError(RuntimeError):
    pass


class Turns:
    """One group's view of the turn folder ``folder``; ``world_sizes[g]`` is group g's size."""

    def __init__(self, folder: str | Path, group: int, world_sizes: list[int]):
        self.folder, self.group, self.world_sizes = Path(folder), group, list(world_sizes)
        self.spans: list[tuple[int, int]] = []  # (start, end) CLOCK_MONOTONIC ns of each of this group's turns
        self._start, self._seq = 0, -1  # the turn number this rank last ran in
        self._pipe: int | None = None  # this rank's wake-up pipe, read end (``ready``)

    @classmethod
    def create(cls, folder: str | Path, world_sizes: list[int]) -> list["Turns"]:
        """Set up ``folder`` (group 0 goes first) and return one Turns per group."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        _write(folder / "turn", "0 0")
        return [cls(folder, g, world_sizes) for g in range(len(world_sizes))]

    def env(self) -> dict[str, str]:
        return {ENV: json.dumps({"folder": str(self.folder), "group": self.group, "world_sizes": self.world_sizes})}

    @classmethod
    def from_env(cls) -> "Turns | None":
        raw = os.environ.get(ENV)
        if not raw:
            return None
        d = json.loads(raw)
        return cls(d["folder"], int(d["group"]), [int(k) for k in d["world_sizes"]])

    def ready(self, rank: int) -> None:
        """Mark this rank ready (models built, clocks aligned): the first turn waits for every rank."""
        pipe = self.folder / f"wake.{self.group}.{rank}"
        os.mkfifo(pipe, 0o600)
        self._pipe = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)  # RDWR: opening does not wait for a writer
        _write(self.folder / f"ready.{self.group}.{rank}", "")
        _wake_all(self.folder)

    def take(self, timeout_s: float) -> None:
        """Sleep until it is this group's turn (a group that ended is skipped).

        Raises TurnError after ``timeout_s`` (``START_WAIT_S`` for the first turn, while
        the other groups may still be building their models).
        """
        first = not self.spans
        deadline = time.monotonic() + (START_WAIT_S if first else timeout_s)
        while (first and not self._everyone_ready()) or not self._mine():
            if time.monotonic() > deadline:
                raise TurnError(f"world size {self.world_sizes[self.group]} waited more than "
                                f"{START_WAIT_S if first else timeout_s:.0f} s for its turn: "
                                f"another group's round never ended")
            self._sleep(min(WAKE_S, max(0.0, deadline - time.monotonic())))
        self._start, self._seq = time.monotonic_ns(), self._current()[1]

    def hand_on(self, rank: int) -> None:
        """End this group's turn; rank 0 hands it to the next group (after a barrier in the group)."""
        self.spans.append((self._start, time.monotonic_ns()))
        if rank == 0:
            self._pass(self._seq + 1)

    def end(self) -> None:
        """This group has no more rounds (done or failed): the others stop waiting for it."""
        _write(self.folder / f"ended.{self.group}", "")
        cur, seq = self._current()
        if cur == self.group:
            self._pass(seq + 1)  # wakes every rank
        else:
            _wake_all(self.folder)

    def _pass(self, seq: int) -> None:
        _write(self.folder / "turn", f"{(self.group + 1) % len(self.world_sizes)} {seq}")
        _wake_all(self.folder)

    def _sleep(self, seconds: float) -> None:
        """Block until someone writes to this rank's pipe (or ``seconds`` pass); no CPU meanwhile."""
        if self._pipe is None:
            time.sleep(min(seconds, 0.01))
            return
        if select.select([self._pipe], [], [], seconds)[0]:
            try:
                os.read(self._pipe, 4096)
            except BlockingIOError:
                pass

    def _current(self) -> tuple[int, int]:
        """(group, turn number) of the turn file: whose turn it is, and how many turns were handed on."""
        try:
            group, seq = (self.folder / "turn").read_text().split()
            return int(group), int(seq)
        except (OSError, ValueError):  # os.replace leaves a whole file, so this is a missing folder
            return -1, -1

    def _mine(self) -> bool:
        """A turn this rank has not run yet, of this group or, if that group ended, of the
        next one that has not. The turn number keeps a rank that passed the group's barrier
        before rank 0 handed the turn on from running the same turn twice."""
        cur, seq = self._current()
        n = len(self.world_sizes)
        if cur < 0 or seq == self._seq:
            return False
        for g in [(cur + i) % n for i in range(n)]:
            if not (self.folder / f"ended.{g}").exists():
                return g == self.group
        return True

    def _everyone_ready(self) -> bool:
        return all((self.folder / f"ready.{g}.{r}").exists() or (self.folder / f"ended.{g}").exists()
                   for g, k in enumerate(self.world_sizes) for r in range(k))


def _wake_all(folder: Path) -> None:
    """A byte into every waiting rank's pipe: each wakes and looks at the turn file."""
    for pipe in folder.glob("wake.*"):
        try:
            fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # its rank has gone (ENXIO: no reader)
            continue
        try:
            os.write(fd, b"!")
        except OSError:  # its pipe is full of wake-ups already (EAGAIN)
            pass
        finally:
            os.close(fd)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)  # atomic: a reader sees the old file or the new one

