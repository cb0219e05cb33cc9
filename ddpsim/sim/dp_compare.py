"""DataParallel beside DDP on the same pieces: both iterations SIMULATED, and the speed-up.

DDP's side is ddpsim's own simulator (``simulate``): N processes, each with its own device and
its own GIL, run the forward and backward on their 1/N of the batch; the gradients go through
torch's buckets (25 MiB, the first 1 MiB after the rebuild), each bucket's ring allreduce
launched from the backward as soon as it is full (reducer.cpp's ``mark_bucket_ready``), the
optimizer on every device. The network is the same copy bandwidth and latency that
DataParallel's copies pay (``DPCosts.copy_Bps``, ``copy_latency_s``), so the two differ only in
what each does with them. ``dataparallel.py`` says what both leave out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ddpsim.sim.api import simulate
from ddpsim.sim.config import SimConfig
from ddpsim.sim.dataparallel import LABEL, DPCosts, IterationSim, Phase, chunks, simulate_dataparallel
from ddpsim.sim.network import Link
from ddpsim.sim.workload import ParamSpec, Workload

DDP_ITERS = 3  # simulated DDP iterations: the last is steady (after the bucket rebuild)
MAX_DEVICES = 8  # the scaling curve goes from 1 to this many devices


@dataclass
class Comparison:
    """DataParallel and DDP on ``n_devices`` devices, and iteration times against N (SIMULATED)."""

    costs: DPCosts
    n_devices: int
    dp: IterationSim
    ddp: IterationSim
    scaling: list[tuple[int, float, float]]  # (devices, DataParallel s, DDP s)
    label: str = LABEL

    @property
    def speedup(self) -> float:
        """DDP's speed-up over DataParallel: DataParallel's iteration time over DDP's."""
        return self.dp.iteration_s / self.ddp.iteration_s


def ddp_workload(c: DPCosts, n_devices: int) -> Workload:
    """One DDP rank's step on its chunk of the batch, from the measured pieces."""
    samples = chunks(c.batch, n_devices)[0]  # the largest chunk: the rank everyone waits for
    backward = c.backward_s(samples)
    params = [ParamSpec(i, name, nbytes) for i, (name, nbytes) in enumerate(c.params)]
    link = Link(alpha_s=c.copy_latency_s, bandwidth_Bps=c.copy_Bps, algo="ring", name="measured copy")
    return Workload(
        name=f"{c.model}@dataparallel-pieces", params=params, ready_order=list(c.ready_order),
        grad_compute_s=[backward * s for s in c.grad_share], link=link,
        forward_s=c.forward_s(samples), pre_backward_s=c.loss_s, finalize_s=c.param_bytes / c.copy_Bps,
        optimizer_s=c.optimizer_s, buffer_bytes=c.buffer_bytes,
        meta={"kind": "dataparallel-pieces", "model": c.model, "batch": c.batch, "source": c.source})


def simulate_ddp(c: DPCosts, n_devices: int) -> IterationSim:
    """DDP's steady iteration for ``c`` on ``n_devices`` ranks (ddpsim.sim), as device timelines."""
    n = len(chunks(c.batch, n_devices))
    trace, _ = simulate(ddp_workload(c, n), SimConfig(world_size=n, iters=DDP_ITERS, trace_ranks=n))
    phases: list[Phase] = []
    ends = []
    for r in trace.ranks:
        it = r.iterations[-1]
        bcast = it.buffer_broadcast
        t0 = it.forward.start_ns if bcast is None else min(it.forward.start_ns, bcast.launch_ns)

        def s(ns: int) -> float:
            return (ns - t0) * 1e-9
        fwd_start = it.forward.start_ns if bcast is None else max(it.forward.start_ns, bcast.complete_ns)
        if bcast is not None:
            phases.append(Phase(r.rank, "buffer broadcast", s(bcast.launch_ns), s(bcast.complete_ns)))
        phases.append(Phase(r.rank, "forward", s(fwd_start), s(it.forward.end_ns)))
        phases.append(Phase(r.rank, "backward", s(it.backward.start_ns), s(it.backward.end_ns)))
        phases += [Phase(r.rank, "allreduce", s(b.launch_ns), s(b.complete_ns)) for b in it.buckets]
        if it.optimizer is not None:
            phases.append(Phase(r.rank, "optimizer", s(it.optimizer.start_ns), s(it.optimizer.end_ns)))
        ends.append(max(p.end_s for p in phases if p.device == r.rank))
    return IterationSim("DDP", n, phases, max(ends))


def compare(c: DPCosts, n_devices: int, max_devices: int = MAX_DEVICES) -> Comparison:
    """DataParallel beside DDP at ``n_devices``, and both iteration times for 1..max_devices."""
    dp, ddp = simulate_dataparallel(c, n_devices), simulate_ddp(c, n_devices)
    scaling = [(n, simulate_dataparallel(c, n).iteration_s, simulate_ddp(c, n).iteration_s)
               for n in range(1, min(max_devices, c.batch) + 1)
               if len(chunks(c.batch, n)) == n]  # torch.chunk gives fewer chunks for some n: skipped
    return Comparison(c, dp.n_devices, dp, ddp, scaling)
