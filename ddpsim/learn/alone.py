"""The backward's compute alone: what a what-if without any collective (the ``noop`` hook) computes.

Note [A run without collectives computes alone]: with ``noop_hook`` DDP sends nothing, so on a
CPU rank nothing else runs on the rank's core during the backward and the backward takes the
compute alone. A plain recording measures it directly: the autograd thread's CPU time over the
backward (``backward_cpu_ns``, Note [The backward's compute alone] in record/instrument.py),
less the division of every bucket by the world size that DDP's hook does there and a noop hook
does not (the learnt launch cost per byte, ``Workload.launch_s_per_byte``, times the gradients'
bytes; the per-launch part a noop hook keeps, as ``sim/hooked.launch_cost`` does). The learnt
workload does not know it: its per-gradient compute is the recorded wall time with gloo's share
taken out by the shared-core model (``learn/contention.py``), then scaled until the replay
matches the recorded phases (``refine``), and that split is the least certain part of the CPU
model (docs/comm-hooks.md: noop predicted up to 33% fast with it alone). So
``refine.measure_alone`` simulates the recording's own noop what-if and keeps, per recorded rank,
the factor that makes its backward the measured one; ``replay_config`` applies it where the
replay plays the recorded ranks (the recorded world size, their recorded speeds), to the
synced micro-steps' backward only (``SimConfig.synced_backward_scale``): a no_sync micro-step
sends nothing with any hook and already plays the compute it recorded (Note [A no_sync step
computes alone] in refine.py). Only for a plain recording (no comm hook, or ``allreduce``: another hook's
casts are in its CPU time too) with a core per rank (where ranks share a core, the simulated
backward's wall time holds the others' compute as well). Every other what-if, and a recording
without the measurement (GPU runs, older recordings), keeps the learnt split.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import steady_cycles
from ddpsim.learn.noise import simulated_rank
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace

KEY = "alone_backward_scale"  # Workload.meta: {rank: factor} for a noop what-if (this Note)


def alone_ns(w: Workload, trace: Trace) -> dict[int, float]:
    """{simulated rank (``noise.simulated_rank``): the backward alone of a noop step, ns}: the median
    ``backward_cpu_ns`` over the recorded rank's steady synced iterations less the buckets' division (this
    Note), where every one has it."""
    hook = (trace.meta.get("options") or {}).get("comm_hook")
    cpu = w.meta.get("shared_core") and not w.link.cpus  # gloo on CPU cores, a core per rank
    if hook not in (None, "allreduce") or not cpu or not w.meta.get("recorded_ranks"):
        return {}  # not a plain CPU recording replayed rank by rank (this Note)
    steady = set(w.meta.get("steady_iterations") or ())
    division_ns = w.launch_s_per_byte * sum(p.bytes for p in w.params) * 1e9  # every bucket, unused gradients too
    out, playing = {}, simulated_rank(trace)  # keyed as the replay plays the ranks (under Join, not by number)
    for r in trace.ranks:
        its = [it for it in r.iterations if it.iteration in steady and it.sync]
        if its and all(it.backward_cpu_ns for it in its):
            alone = statistics.median(it.backward_cpu_ns for it in its) - division_ns
            if alone > 0:
                out[playing[r.rank]] = alone
    return dict(sorted(out.items()))


def simulated_ns(sim: Trace) -> dict[int, float]:
    """{rank: median backward (start to end: finalize_backward included) over the simulation's steady
    synced iterations}: in a noop what-if, what ``alone_ns`` gives."""
    steady = {i for c in steady_cycles(sim, shadowed=True) for i in c}
    return {r.rank: statistics.median(it.backward.end_ns - it.backward.start_ns
                                      for it in r.iterations if it.iteration in steady and it.sync)
            for r in sim.ranks}


def noop_scale(w: Workload, comm_hook: str | None, world_size: int) -> dict | None:
    """The ``synced_backward_scale`` of a noop what-if at the recorded world size of a workload that
    measured its backward alone (this Note), else None."""
    scale = w.meta.get(KEY)
    if not scale or comm_hook != "noop" or world_size != w.meta.get("recorded_world_size"):
        return None
    return {int(r): float(s) for r, s in scale.items()}
