"""One CPU core shared by the jobs running on it: the simulator's contention model.

On CPU gloo each rank is pinned to a core (two ranks per core with 4 ranks on
this 2-core machine), and that core runs the rank's compute *and* its gloo
threads. ``Core`` plays this as processor sharing; ``share`` says how fast each
job progresses, and ranks pinned to the same core take turns (Note [Ranks take
turns on a shared core]). ``contention.compute_work`` is its inverse, used to learn a
workload from a recording.
"""
from __future__ import annotations

import math

import simpy


def share(demands: list[float], lanes: int = 1) -> list[float]:
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

    With every demand 1 this is plain processor sharing (each job at ``1/n``). ``lanes``: how many
    jobs run at full speed before they share (a link's collectives: Note [Process groups share the
    link] in platform.py); a CPU core has one.
    """
    light = sum(d for d in demands if d < 1.0)
    full = sum(1 for d in demands if d >= 1.0)
    rates = [1.0 / (full + 1 + light - d) if d < 1.0 else None for d in demands]
    used = sum(d * r for d, r in zip(demands, rates) if r is not None)
    rest = min(1.0, max(0.0, lanes - used) / full) if full else 0.0
    return [rest if r is None else r for r in rates]


class Core:
    """One CPU core shared by the jobs running on it (processor sharing, ``share``).

    ``run(size, demand, owner)`` starts a job that takes ``size`` seconds alone on
    the core and returns an event that fires when it is done; while other jobs run
    it progresses at the rate ``share`` gives it. The core wakes only when the next
    job finishes or a time slice ends (a generation counter cancels stale wake-ups
    when a job starts in between).

    ``time_slice_s`` > 0: the full jobs of different ``owner`` s (ranks pinned to
    the same core) take turns (Note [Ranks take turns on a shared core]).
    """

    EPS = 1e-12

    def __init__(self, env: simpy.Environment, time_slice_s: float = 0.0, lanes: int = 1):
        self.env = env
        self.lanes = lanes  # jobs at full speed before they share (``share``): 1 for a CPU core
        self.jobs: list[list] = []  # [remaining (s alone), event, demand, owner]
        self.rates: list[float] = []
        self.t = env.now
        self.gen = 0
        self.slice = time_slice_s
        self.owner = None  # the rank whose turn it is (time slices only)
        self.turn_end = 0.0
        self.check_pending = False
        self.kept = False  # the owner keeps its turn while it does other work (``keep``)
        self.ranks = 0  # ranks pinned to this core (set by the model)

    def keep(self, owner) -> None:
        """``owner`` goes on with work the model does not play (the gap to its next
        iteration: in an interleaved recording, the other runs' iterations) until its
        time slice ends; the other owners wait till then."""
        if self.slice > 0 and self.owner == owner:
            self.kept = True
            self._advance()
            self._reschedule()

    def _advance(self) -> None:
        now = self.env.now
        if self.jobs and now > self.t:
            dt = now - self.t
            for j, r in zip(self.jobs, self.rates):
                j[0] -= dt * r
        self.t = now

    def run(self, size: float, demand: float = 1.0, owner=None) -> simpy.Event:
        ev = self.env.event()
        if size <= 0:
            return ev.succeed()
        self._advance()
        self.jobs.append([size, ev, min(1.0, max(demand, 1e-9)), owner])
        self._reschedule()
        return ev

    def _turns(self) -> list:
        """Owners with full jobs waiting, in rank order (time slices only)."""
        return sorted({j[3] for j in self.jobs if j[2] >= 1.0 and j[3] is not None})

    def _take_turn(self, owners: list, drop_idle: bool) -> None:
        """Who runs now.

        Note [Ranks take turns on a shared core]: two busy processes pinned to one
        core do not each run at half speed: the kernel runs one for a time slice,
        then the other (3.95 ms here, ``record.timeslice.time_slice``). With 4 ranks on 2
        cores this shows in every iteration: the rank that finishes its step first
        goes on (to its next iteration, or the next run of an interleaved
        recording) for the rest of its slice while its core-mate waits, so the
        ranks start and end iterations ~4-10 ms apart (validate grid, 2026-11-21;
        the simulator, with equal shares, started them together and predicted
        mlp and transformer at 4 ranks 5-10% fast). So full jobs of different
        owners take turns of ``time_slice_s``: the owner runs its jobs for a slice
        while another owner has work waiting, then the next owner in rank order.
        An owner keeps its turn through jobs that follow each other at one instant;
        it loses it when it blocks (a collective it waits for) unless it ``keep`` s
        it. Collectives (light jobs) are unaffected. Over many slices each owner
        gets the share ``share`` gives it.
        """
        now = self.env.now
        kept = self.kept and now < self.turn_end - self.EPS
        if not owners:
            if not kept:
                self.owner, self.kept = None, False
        elif self.owner is None:
            self._pass_turn(owners[0])
        elif self.owner not in owners:  # blocked, or between two jobs at this instant:
            if kept:
                return
            if not drop_idle:  # decide once the instant's other events have run
                if not self.check_pending:
                    self.check_pending = True
                    self.env.timeout(0).callbacks.append(self._check)
                return
            self._pass_turn(self._next(owners))
        elif now >= self.turn_end - self.EPS and len(owners) > 1:
            self._pass_turn(self._next(owners))

    def _next(self, owners: list):
        """The owner after the current one, in rank order, wrapping round."""
        return next((o for o in owners if o > self.owner), owners[0])

    def _pass_turn(self, owner) -> None:
        self.owner, self.turn_end, self.kept = owner, self.env.now + self.slice, False

    def _check(self, _e) -> None:
        self.check_pending = False
        self._advance()
        self._reschedule(drop_idle=True)

    def _reschedule(self, drop_idle: bool = False) -> None:
        self.gen += 1
        self.rates = share([j[2] for j in self.jobs], self.lanes)
        turn_dt = float("inf")
        if self.slice > 0:
            owners = self._turns()
            self._take_turn(owners, drop_idle)
            if len(owners) > 1 or (owners and self.owner not in owners):
                turned = [i for i, j in enumerate(self.jobs) if j[2] >= 1.0 and j[3] is not None]
                pool = sum(self.rates[i] for i in turned)
                mine = [i for i in turned if self.jobs[i][3] == self.owner]
                for i in turned:
                    self.rates[i] = pool / len(mine) if i in mine else 0.0  # mine: [] while deciding
                if (self.owner in owners and len(owners) > 1) or self.kept:
                    turn_dt = max(0.0, self.turn_end - self.env.now)
        if self.jobs:
            gen = self.gen
            dt = min([turn_dt] + [j[0] / r for j, r in zip(self.jobs, self.rates) if r > 0])
            if dt != float("inf"):
                self.env.timeout(max(0.0, dt)).callbacks.append(lambda _e: self._wake(gen))

    def _wake(self, gen: int) -> None:
        if gen != self.gen:
            return
        self._advance()
        tol = self.EPS * max(1.0, max(j[0] for j in self.jobs))
        # a job closer to its end than the clock can step (its ulp, late in a long run) is done: waiting
        # for it would not move env.now, and the core would wake at the same instant for ever
        tick = 2 * math.ulp(self.env.now)
        done = [j[0] <= tol or (r > 0 and j[0] / r <= tick) for j, r in zip(self.jobs, self.rates)]
        finished = [j for j, d in zip(self.jobs, done) if d]
        self.jobs = [j for j, d in zip(self.jobs, done) if not d]
        for j in finished:
            j[1].succeed()
        self._reschedule()
