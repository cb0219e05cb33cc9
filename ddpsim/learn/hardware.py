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
"""
from __future__ import annotations

from ddpsim.sim import network
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace


def in_replay(w: Workload, trace: Trace, fields: dict) -> dict:
    """``fields`` of a replay (``replay_config``) with ``hardware`` set: the compute slowdown the
    recording's own collectives caused stays where they were NCCL's, unless ``fields`` sets one
    (Note [The recorded slowdown goes with its collectives])."""
    if not fields.get("hardware") or "interference" in fields:
        return fields
    return {**fields, "interference": keeps_slowdown(w, trace) or 0.0}


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
