"""A recorded run on GPU hardware it did not run on: ``--hardware GPU-NETWORK`` with ``--trace``, and
the What-if page's Network for a GPU recording. One rule for both, so they give one number.

Note [The recorded slowdown goes with its collectives]
A recording's compute runs slower while its collectives are in flight, and ``learn`` keeps that
slowdown as the link's ``interference`` (learn/contention.py). On another network the collectives
are NCCL's (sim/nccl.py on the node and fabric of ``network_for``), so the slowdown is kept only
where the recorded collectives were NCCL's too: kernels on the same GPUs, competing with the
compute for its SMs and memory. A gloo recording's slowdown is its host's (gloo reduces on the CPU,
and with CUDA tensors copies through it; the bundled H100 ResNet-18 import's compute ran 131%
slower while two ranks shared one GPU), which NCCL on a GPU cluster does not have: it takes the
chosen network's own figure instead (the profiles' ``interference``, 0 for the GPU fabrics, for
want of a measurement: docs/accuracy.md).

Note [A GPU recording at another world size]
A recording of NCCL on GPUs times its collectives at the world size it ran, and nothing at any
other (one rank times none that cross a link). Its GPU's node profile says what NCCL does there:
NVLink inside a node, the GPU's default fabric between nodes, NCCL's tuning model over them
(sim/nccl.py, checked against published runs: docs/reproductions.md), the same model a GPU model
runs on. So that is where such a recording goes at another world size when no network is named
(``node_default``; ``experiments.worldsize.plan`` says so in one line), and a network named
(``--hardware``, ``--bandwidth-gbps``, a calibration, the What-if page's Network) replaces it.
A gloo recording (its collectives went through the host), a CPU run or a GPU without a node
profile still asks for a network.
"""
from __future__ import annotations

from ddpsim.sim import network
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace


def in_replay(w: Workload, trace: Trace, fields: dict) -> dict:
    """``fields`` of a replay (``replay_config``), on the recording's node at a world size it did not run
    where they name no network (Note [A GPU recording at another world size]). With ``hardware`` set,
    the compute slowdown the recording's own collectives caused stays where they were NCCL's, unless
    ``fields`` sets one (Note [The recorded slowdown goes with its collectives])."""
    if fields.get("bandwidth_gbps") is None and not fields.get("hardware"):
        fields = {**fields, "hardware": node_default(trace, int(fields["world_size"]))}
    if "jitter" not in fields and (spread := profile_spread(w, fields.get("hardware"), int(fields["world_size"]))):
        fields = {**fields, "jitter": spread, "jitter_mode": "expected"}  # as a GPU model of that GPU plays it
    if not fields.get("hardware") or "interference" in fields:
        return fields
    return {**fields, "interference": keeps_slowdown(w, trace) or 0.0}


def profile_spread(w: Workload, hardware: str | None, world_size: int) -> float:
    """The rank-to-rank spread a one-rank recording takes on GPU nodes ``hardware`` at ``world_size`` ranks:
    its GPU profile's ``rank_spread``, as a GPU model of that GPU (one rank measures none: Note [Waiting for
    the slowest rank] in sim/stragglers.py); 0 where the recording held more ranks (theirs is measured) or
    learnt one anyway, at one rank, or off GPU nodes."""
    if (not hardware or world_size < 2 or int(w.meta.get("recorded_world_size") or 0) != 1
            or w.meta.get("jitter_estimated")):
        return 0.0
    return float(network.parse_hardware(hardware)[0].get("rank_spread", 0.0))


def node_default(trace: Trace, world_size: int) -> str | None:
    """The GPU-NETWORK of an NCCL recording on a GPU with a node profile at ``world_size`` ranks, where it
    did not run and no calibration covers (Note [A GPU recording at another world size]); else None."""
    from ddpsim.sim.netmodel import covers

    if (world_size in (1, trace.world_size) or str(trace.meta.get("backend")) != "nccl"
            or covers(trace.meta.get("calibration"), world_size)):
        return None
    return hardware_of(trace, "nvlink")


def keeps_slowdown(w: Workload, trace: Trace) -> float | None:
    """The recorded compute slowdown a replay on other GPU hardware keeps, or None where it is the
    host's (Note [The recorded slowdown goes with its collectives])."""
    nccl = str(trace.meta.get("backend", "")) == "nccl"
    return w.link.interference if nccl and w.link.interference else None


def hardware_of(trace: Trace, net: str) -> str | None:
    """The GPU-NETWORK a GPU recording runs on over network ``net`` (its GPU's node from
    ``meta.gpu``, joined by ``net``), or None: a CPU recording, a GPU no profile describes, or a
    network that does not join GPUs; those take ``net``'s datasheet figures as one flat link."""
    node = node_of(trace)
    return f"{node}-{net}" if node and net in network.gpu_networks() else None


def node_of(trace: Trace | None) -> str | None:
    """The gpus.json node of a GPU recording (``meta.gpu``); None: a CPU run, an unknown GPU."""
    return network.node_named(trace.meta.get("gpu")) if trace is not None else None
