"""The network at a world size a trace was not recorded at: what ``simulate``, ``sweep``,
``validate --against`` and the What-if page do when asked for other ranks.

Note [Another world size on the user's path]: a trace times its allreduces at the world
size it ran; how they grow with more ranks is not in it. Fitted at 2 ranks and run at 4,
a 2-core gloo transformer came out -44.6% (57.6 ms predicted, 104.1 ms measured), with
no word that nothing was measured at 4; with ``calibrate --world-sizes 2,4`` stored in
the trace first, -4.4%. So, unless the user names a network (``--hardware``,
``--bandwidth-gbps``, ``--calibration``), one of:

- ``alone``: one rank, which sends nothing over a network: nothing to measure or ask for;
- ``calibrated``: the trace carries a calibration for that world size (``meta.calibration``,
  from ``ddpsim calibrate --trace``, or measured here before): it is used;
- ``measure``: the trace is a CPU gloo run made on this host: the allreduce is measured at
  the recorded and the target world size now (``calibrate``, seconds) and stored in the
  trace's meta, unless the user said not to, or more ranks than this host's cores and than
  the simulator plays one by one would share them (``shared_beyond_play``) (``uncalibrated``:
  one line says the prediction carries no measurement at that size);
- ``node``: a recording of NCCL on a GPU with a node profile: NCCL's model on such nodes (Note
  [A GPU recording at another world size] in learn/hardware.py);
- ``refuse``: one rank (Note [No network from one rank]), another GPU trace, or another host:
  one line asks for a network.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from ddpsim.learn.hardware import node_default
from ddpsim.learn.linkfit import NO_NETWORK
from ddpsim.sim.config import SimConfig
from ddpsim.sim.network import network_for
from ddpsim.trace import Trace

SIZES = [k * 1024 for k in (4, 64, 512, 2048, 8192)]  # bytes timed at each world size (calibrate's default)
REPS = 15  # repetitions per size and round (calibrate's default)
ROUNDS = 2  # rounds of the world sizes in turn (Note [Calibrate world sizes in turns]); calibrate takes 3
MAX_MEASURED = 16  # the most ranks measured here; more come from the world-size fit through those measured


def measurable(world_size: int) -> int:
    """The largest world size measured for ``world_size``: itself, or at most twice this host's CPUs (and
    ``MAX_MEASURED``); the calibration's world-size fit (``sim.netmodel``) carries it further."""
    return min(world_size, max(4, 2 * (os.cpu_count() or 1)), MAX_MEASURED)


def shared_beyond_play(world_size: int) -> bool:
    """More ranks than this host's CPUs, and than the simulator plays one by one, as ranks sharing cores
    need (Note [Ranks that share a CPU]): measured here, such a world size is refused (``sim.api``)."""
    return world_size > max(SimConfig.max_explicit_ranks, os.cpu_count() or 1)


@dataclass(frozen=True)
class Plan:
    """What asking ``trace`` for ``world_size`` ranks will do (module docstring)."""

    action: str  # "recorded", "alone" (one rank), "calibrated", "measure", "uncalibrated" or "refuse"
    message: str  # one line for the user of the command line
    short: str = ""  # a refusal's reason without the command line's options (the What-if page offers networks)


def is_local_cpu_run(trace: Trace) -> bool:
    """A real gloo run on CPU tensors, recorded on this host: one whose network can be measured here."""
    placement = (trace.meta.get("placement") or {}).get("device")
    hosts = set(trace.meta.get("hosts") or [r.host for r in trace.ranks])
    return (trace.source == "real" and str(trace.meta.get("backend")) == "gloo" and placement != "cuda"
            and not trace.imported and hosts == {socket.gethostname()})


def plan(trace: Trace, world_size: int, calibrate: bool = True) -> Plan:
    """The action for ``world_size`` ranks when the user named no network."""
    from ddpsim.sim.netmodel import covers

    k = trace.world_size
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"--world-size must be an integer >= 1, not {world_size!r}")
    if world_size == k:
        return Plan("recorded", f"{k} ranks, as recorded")
    if world_size == 1:  # nothing to measure or to ask for, wherever the trace was recorded
        return Plan("alone", "one rank sends its allreduces over no network, so none is priced or measured")
    if (spec := node_default(trace, world_size)):  # Note [A GPU recording at another world size]
        beyond = f"nothing was measured beyond the recorded {k} rank{'s' * (k != 1)}"  # one line for every such size
        return Plan("node", f"{beyond}: at other world sizes the allreduce is {network_for(spec, world_size).name} (as "
                            f"--hardware {spec}; another network: --hardware or --bandwidth-gbps)",
                    f"the network is the recording's GPU's node profile (below): {beyond}; pick another network above")
    if k < 2:  # Note [No network from one rank]
        return Plan("refuse", NO_NETWORK.format(ranks=k).format(world_size=world_size),
                    f"the trace has {k} rank and no collective to learn a network from")
    cal = trace.meta.get("calibration")
    local = is_local_cpu_run(trace)
    measured = measured_sizes(cal)
    if isinstance(cal, dict) and covers(cal, world_size) and (not local or measurable(world_size) in measured):
        how = "measured in" if world_size in measured else "the world-size fit through"
        return Plan("calibrated", f"the allreduce at {world_size} ranks is {how} the trace's calibration "
                                  f"(measured at {', '.join(map(str, sorted(measured)))} ranks)")
    if local:
        if shared_beyond_play(world_size):  # a measurement would put them on these cores: refused
            return Plan("uncalibrated", f"nothing is measured for {world_size} ranks: measured on this machine's "
                                        f"{os.cpu_count()} cores, they would share them, and ranks that share cores "
                                        f"are simulated only up to {SimConfig.max_explicit_ranks}; so each rank is "
                                        "given a core of its own and the allreduce is the ring model fitted at "
                                        f"{k} ranks")
        if calibrate:
            top = measurable(world_size)
            beyond = "" if top == world_size else f", and {world_size} from the fit through them"
            return Plan("measure", f"measuring the allreduce at {k} and {top} ranks on this machine{beyond} "
                                   "(about 10-40 s; --no-calibrate skips it)")
        return Plan("uncalibrated", f"nothing was measured at {world_size} ranks: the allreduce cost is the ring "
                                    f"model fitted at {k} ranks (leave out --no-calibrate to measure it)")
    hosts = ", ".join(sorted(set(trace.meta.get("hosts") or []))) or "unknown"
    where = ("a GPU trace" if str(trace.meta.get("backend")) == "nccl" or trace.imported
             else "a simulated trace" if trace.source != "real" else f"recorded on another host ({hosts})")
    why = f"the trace is {where} and has no calibration at {world_size} ranks"
    return Plan("refuse", f"{why}: give a network (the What-if page's Network; --hardware GPU-NETWORK such as h100-nvlink, --bandwidth-gbps G "
                          "[--latency-us L], or --calibration FILE from `ddpsim calibrate --world-sizes ...`)", why)


def measured_sizes(cal) -> set[int]:
    """The world sizes calibration ``cal`` (``meta.calibration``) measured; none without one."""
    if not isinstance(cal, dict):
        return set()
    return ({int(k) for k in (cal.get("world_sizes") or {})} or {int(cal.get("world_size", 0))}) - {0}


def measure(trace: Trace, world_size: int, log=None) -> dict:
    """Measure the allreduce at the trace's and ``world_size`` ranks here; store it in ``trace.meta``."""
    from ddpsim.experiments.calibrate import calibrate_world_sizes

    t0 = time.monotonic()
    sizes = sorted({trace.world_size, measurable(world_size)})
    cal = calibrate_world_sizes(SIZES, REPS, sizes, log=log, rounds=ROUNDS)
    cal["measured_for"] = {"world_sizes": sizes, "seconds": round(time.monotonic() - t0, 1)}
    trace.meta["calibration"] = cal
    return cal


def prepare(trace: Trace, world_size: int, calibrate: bool = True, log=print) -> Plan:
    """Do what ``plan`` says (measure, or raise the refusal as a ValueError); return the plan,
    its message already printed through ``log`` (the world size as recorded prints nothing)."""
    p = plan(trace, world_size, calibrate)
    if p.action == "refuse":
        raise ValueError(p.message)
    if p.action != "recorded":
        log(p.message)
    if p.action == "measure":
        cal = measure(trace, world_size)
        sizes = ",".join(map(str, cal["measured_for"]["world_sizes"]))
        log(f"measured in {cal['measured_for']['seconds']:.0f} s, for this command only: the trace file is not "
            f"changed (`python -m ddpsim calibrate --world-sizes {sizes} --trace FILE` keeps it there)")
    return p
