"""Where a simulated rank's work runs: its compute device and the network.

The DDP model (``model.py``) says *what* each rank does and in which order; the
platform says how long it takes. It is an object the model calls, so another
machine is another class with the same methods:

``compute(actor, s)``     ``s`` seconds of the rank's own work (forward, optimizer, ...)
``gradient(actor, s)``    one gradient's backward compute (may be slowed by communication)
``launched(actor, work)`` the rank has launched collective ``work`` (every rank launches it;
                          the last launch starts its transfer)
``transfer(work)``        a process: the collective's data movement, until it is done
``elsewhere(actor, s)``   ``s`` seconds of work the DDP model does not play (the gap
                          before the rank's next iteration: data loading, ...)

Two platforms:

``Devices``      each rank computes on a device of its own: a GPU's compute stream with
                 NCCL's stream beside it (the GPU platform: links from the hardware
                 profiles, NVLink inside a node and a fabric between nodes,
                 ``network.network_for``), or a CPU core nobody shares; collectives
                 run on the network, at most ``link.concurrency`` at once (NCCL's one stream, gloo's two threads),
                 each taking ``link.allreduce_s``; more in flight than that (a round-robin
                 hook's groups) share the link's bandwidth (Note [Process groups share the link]).
                 A gradient started while one of its own rank's collectives is launched and not done is slowed by
                 ``1 + link.interference`` (decided at the gradient's start; Note
                 [Communication slows compute from the rank's own launch]). The other
                 direction (NCCL's kernels slowed by the compute kernels they share
                 the SMs with) is not modelled: no measurement here separates it
                 (docs/reproductions.md).
``SharedCores``  CPU gloo with each rank pinned to a core (``link.shared_core``): the
                 core runs the rank's compute *and* its collectives' CPU work
                 (``core.Core``: processor sharing, Note [Latency-bound jobs on a shared
                 core]); a collective completes when its job has finished on every
                 core. With ``link.cpus`` (more ranks than cores) rank r uses core
                 ``r % cpus``; with ``link.time_slice_s`` the ranks on a core take turns
                 (Note [Ranks take turns on a shared core]), and a rank keeps its turn
                 into the gap before its next iteration.
Times are seconds (floats).
"""
from __future__ import annotations

import simpy

from ddpsim.sim.core import Core
from ddpsim.sim.network import Link


class Devices:
    """A device per rank and a network with ``link.concurrency`` slots.

    Note [Process groups share the link]: ``round-robin:N`` gives each process group its
    own slots, so N groups' collectives run beside each other; but they run on the same
    NVLink and NICs, which can hide one's latency behind another's data, not multiply the
    bandwidth. So beyond the link's own ``concurrency`` (the collectives its cost was
    priced or learnt with: NCCL's one stream, gloo's two threads, a fit that saw them
    together), a collective's time alone is split into its latency (the same collective
    of 0 bytes: ``2(k-1)·alpha`` on a flat ring, NCCL's latency at 0 bytes on a cluster),
    run in parallel, and its data, which moves on the link (a ``core.Core`` of ``concurrency``
    lanes) shared by every collective in flight. Four groups of ResNet-50 on 8-GPU nodes with
    one 25 GbE NIC each (64 ranks, 5 MiB buckets) simulated a 45.4 ms iteration without it, where
    the buckets keep the NIC busy 89 ms; with it 103.9 ms (one group: 104.5 ms).
    ``--concurrency N`` still gives the link N lanes of its full rate, as its help says.
    """

    coupled = False  # does a gradient's compute time depend on the communication in flight?

    def __init__(self, env: simpy.Environment, link: Link, world_size: int, actors: list):
        self.env, self.link, self.world_size = env, link, world_size
        self.slots = simpy.Resource(env, capacity=link.concurrency)  # a round-robin hook widens it (sim/api.py)
        self.wire = Core(env, lanes=link.concurrency)  # used once the slots outnumber the link's concurrency
        self.ends: dict[tuple, float] = {}  # collectives moving data -> when they will be done
        self.own: dict[int, list] = {}  # id(actor) -> its launched collectives not yet done
        self.coupled = bool(link.interference)

    def compute(self, actor, seconds: float) -> simpy.Event:
        return self.env.timeout(seconds)

    def gradient(self, actor, seconds: float) -> simpy.Event:
        """Note [Communication slows compute from the rank's own launch]: a rank's
        collective competes with its compute from the moment the rank launches it, not
        from when the last rank does: NCCL's kernel is queued on the rank's stream at
        its launch and holds SMs while it waits for its peers; gloo copies a CUDA
        bucket to the host at once, and its threads start (and may spin) at once. The
        learner measures the slowdown the same way, over each gap's overlap with the
        rank's own (launch, complete) spans (``learn.gradients.unmix_interference``).
        Counting it only once every rank had launched left the first launcher's
        gradients unslowed: ResNet-18 at 2 ranks with gloo on one H100
        (``gpucheck``), rank 0's ready times were 25% early (median), 9% with this.
        """
        now = self.env.now
        mine = self.own.get(id(actor), [])
        busy = any(not w.done.triggered and self.ends.get(w.key, now + 1.0) > now  # waiting for peers counts
                   for w in mine)
        return self.env.timeout(seconds * (1.0 + self.link.interference) if busy else seconds)

    def launched(self, actor, work) -> None:
        """``actor`` launched ``work``: from now until it is done it slows that actor's gradients."""
        if self.coupled:
            mine = self.own.setdefault(id(actor), [])
            mine[:] = [w for w in mine if not w.done.triggered]
            mine.append(work)

    def transfer(self, work):
        """Wait for a slot, move the data; ``work.start`` is when it got the slot."""
        with self.slots.request() as slot:
            yield slot
            work.start = self.env.now
            duration = work.seconds if work.seconds is not None else self._priced(work, work.nbytes)
            # on a shared wire it ends when the others let it: not before its time alone
            self.ends[work.key] = float("inf") if self.sharing else self.env.now + duration
            yield self._move(work, duration)
            del self.ends[work.key]

    def _move(self, work, duration: float) -> simpy.Event:
        if self.sharing:
            return self.env.process(self._shared(work, duration))
        return self.env.timeout(duration)

    @property
    def sharing(self) -> bool:
        """More collectives may be in flight than the link's cost was priced with (Note [Process groups
        share the link])."""
        return self.slots.capacity > self.link.concurrency

    def _priced(self, work, nbytes: int) -> float:
        """Seconds ``work``'s collective (a broadcast or an allreduce) of ``nbytes`` takes alone on the link."""
        return (self.link.broadcast_s if work.kind == "broadcast" else self.link.allreduce_s)(nbytes, self.world_size)

    def _shared(self, work, duration: float):
        """Note [Process groups share the link]: the latency alone, then the data on the shared wire."""
        latency = min(duration, self._priced(work, 0))
        yield self.env.timeout(latency)
        yield self.wire.run(duration - latency)

    def elsewhere(self, actor, seconds: float) -> simpy.Event:
        """The rank is busy with work the model does not play; no other rank waits for it."""
        return self.env.timeout(seconds)


class SharedCores(Devices):
    """CPU ranks pinned to cores that also run their gloo threads."""

    def __init__(self, env: simpy.Environment, link: Link, world_size: int, actors: list):
        super().__init__(env, link, world_size, actors)
        self.coupled = True
        # A collective is one job per core carrying the CPU work of the ranks pinned there
        # (``Core.ranks``): `calibrate` timed it with ranks sharing cores as here (Note [Ranks that share a CPU])
        self.cores: list[Core] = []
        self.core_of: dict[int, Core] = {}
        shared = bool(link.cpus) and all(a.count == 1 for a in actors)
        pool = [Core(env, link.time_slice_s) for _ in range(link.cpus)] if shared else []
        for a in actors:  # rank r on core r % cpus when ranks share cores, else a core each
            core = pool[a.rank % link.cpus] if shared else Core(env)
            self.core_of[id(a)] = core
            core.ranks += 1
            if core.ranks == 1:
                self.cores.append(core)

    def compute(self, actor, seconds: float) -> simpy.Event:
        return self.core_of[id(actor)].run(seconds, owner=actor.rank)

    def gradient(self, actor, seconds: float) -> simpy.Event:
        return self.compute(actor, seconds)  # shares the core with this rank's in-flight collectives

    def _move(self, work, duration: float) -> simpy.Event:
        # a job on every core, using only its CPU work's share of it (Note [Latency-bound jobs on a shared core])
        demand = self.link.core_demand
        return simpy.AllOf(self.env, [c.run(duration, demand(work.nbytes, self.world_size, c.ranks))
                                      for c in self.cores])

    def elsewhere(self, actor, seconds: float) -> simpy.Event:
        """The rank keeps its turn on a shared core into the gap (Note [Ranks take turns on a shared core])."""
        self.core_of[id(actor)].keep(actor.rank)
        return self.env.timeout(seconds)


def platform_for(env: simpy.Environment, link: Link, world_size: int, actors: list) -> Devices:
    """The platform ``link`` describes."""
    return (SharedCores if link.shared_core else Devices)(env, link, world_size, actors)
