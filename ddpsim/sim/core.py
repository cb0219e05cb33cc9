"""One CPU core shared by the jobs running on it: the simulator's contention model.

On CPU gloo each rank is pinned to a core (two ranks per core with 4 ranks on
this 2-core machine), and that core runs the rank's compute *and* its gloo
threads. ``Core`` plays this as processor sharing; ``share`` says how fast each
job progresses. ``contention.compute_work`` is its inverse, used to learn a
workload from a recording.
"""
from __future__ import annotations

import simpy


def share(demands: list[float]) -> list[float]:
    """The rate at which each job on one core progresses, given its CPU demand (0, 1].

    Note [Latency-bound jobs on a shared core]: compute needs the whole core
    (demand 1). A collective alone takes ``T`` seconds of which only ``C`` is CPU
    work, the rest is waiting for the peers (Note [Not all of an allreduce is core
    work]); its demand is ``C / T``. It is slowed by every compute job on its core
    as if it were a full job (each wake-up has to wait for a time slice: measured,
    a 2 MiB allreduce took 8.4 ms beside backward, 5.4 ms if only its CPU work were
    shared), but by other collectives only by their demand (two back-to-back
    allreduces nearly overlap). It consumes only its demand of the core, and the
    compute jobs share the rest. So with ``F`` full jobs and light jobs ``i``:

        rate_i = 1 / (F + 1 + sum of the other light jobs' demands)
        rate_full = (1 - sum_i demand_i * rate_i) / F

    With every demand 1 this is plain processor sharing (each job at ``1/n``).
    """
    light = sum(d for d in demands if d < 1.0)
    full = sum(1 for d in demands if d >= 1.0)
    rates = [1.0 / (full + 1 + light - d) if d < 1.0 else None for d in demands]
    used = sum(d * r for d, r in zip(demands, rates) if r is not None)
    rest = max(0.0, 1.0 - used) / full if full else 0.0
    return [rest if r is None else r for r in rates]


class Core:
    """One CPU core shared by the jobs running on it (processor sharing, ``share``).

    ``run(size, demand)`` starts a job that takes ``size`` seconds alone on the
    core and returns an event that fires when it is done; while other jobs run it
    progresses at the rate ``share`` gives it. The core wakes only when the next
    job finishes (a generation counter cancels stale wake-ups when a job starts in
    between).
    """

    EPS = 1e-12

    def __init__(self, env: simpy.Environment):
        self.env = env
        self.jobs: list[list] = []  # [remaining (s alone), event, demand]
        self.rates: list[float] = []
        self.t = env.now
        self.gen = 0

    def _advance(self) -> None:
        now = self.env.now
        if self.jobs and now > self.t:
            dt = now - self.t
            for j, r in zip(self.jobs, self.rates):
                j[0] -= dt * r
        self.t = now

    def run(self, size: float, demand: float = 1.0) -> simpy.Event:
        ev = self.env.event()
        if size <= 0:
            return ev.succeed()
        self._advance()
        self.jobs.append([size, ev, min(1.0, max(demand, 1e-9))])
        self._reschedule()
        return ev

    def _reschedule(self) -> None:
        self.gen += 1
        self.rates = share([j[2] for j in self.jobs])
        if self.jobs:
            gen = self.gen
            dt = max(0.0, min(j[0] / r if r > 0 else float("inf") for j, r in zip(self.jobs, self.rates)))
            if dt != float("inf"):
                self.env.timeout(dt).callbacks.append(lambda _e: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen != self.gen:
            return
        self._advance()
        tol = self.EPS * max(1.0, max(j[0] for j in self.jobs))
        finished = [j for j in self.jobs if j[0] <= tol]
        self.jobs = [j for j in self.jobs if j[0] > tol]
        for j in finished:
            j[1].succeed()
        self._reschedule()
