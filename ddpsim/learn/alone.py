"""The backward's compute alone: what a what-if without any collective (the ``noop`` hook) computes.

Note [A run without collectives computes alone]: with ``noop_hook`` DDP sends nothing, so on a
CPU rank nothing else runs on the rank's core during the backward and the backward takes the
compute alone. A plain recording measures that compute directly: the autograd thread's CPU time
over the backward (``backward_cpu_ns``, Note [The backward's compute alone] in
record/instrument.py). The learnt workload does not: its per-gradient compute is the recorded
wall time with gloo's share taken out by the shared-core model (``learn/contention.py``), then
scaled until the replay matches the recorded phases (``refine``), and that split is the least
certain part of the CPU model (docs/comm-hooks.md: noop predicted up to 33% fast with it alone).
So ``refine.measure_alone`` simulates the recording's own noop what-if and keeps, per recorded rank, the
factor that makes its backward the measured compute alone; ``replay_config`` applies it to a
noop what-if at the recorded world size (``backward_scale``). Every other what-if keeps the
learnt split; a trace without the measurement (GPU runs, older recordings) keeps it for noop too.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import steady_cycles
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace

KEY = "alone_backward_scale"  # Workload.meta: {rank: factor} for a noop what-if (this Note)


def measured_ns(trace: Trace, steady: set[int]) -> dict[int, float]:
    """{rank: median backward_cpu_ns over its steady synced iterations} where every one has it."""
    out = {}
    for r in trace.ranks:
        its = [it for it in r.iterations if it.iteration in steady and it.sync]
        if its and all(it.backward_cpu_ns for it in its):
            out[r.rank] = statistics.median(it.backward_cpu_ns for it in its)
    return out


def simulated_ns(sim: Trace) -> dict[int, float]:
    """{rank: median backward compute (start to last gradient) over the simulation's steady iterations}."""
    steady = {i for c in steady_cycles(sim) for i in c}
    return {r.rank: statistics.median(it.backward_compute_end_ns - it.backward.start_ns
                                      for it in r.iterations if it.iteration in steady)
            for r in sim.ranks}


def noop_scale(w: Workload, cfg: dict) -> dict | None:
    """The ``backward_scale`` for ``cfg`` if it is a noop what-if at the recorded world size of a
    workload that measured its compute alone (this Note), else None."""
    scale = w.meta.get(KEY)
    if not scale or cfg.get("comm_hook") != "noop" or cfg.get("world_size") != w.meta.get("recorded_world_size"):
        return None
    return {int(r): float(s) for r, s in scale.items()}
