"""The network at a world size the open trace did not run, for the What-if page (no Streamlit).

Thin calls into ``ddpsim.experiments.worldsize`` (Note [Another world size on the user's path]):
what the page will do, the measurement its button starts, and a cache key that changes with it.
"""
from __future__ import annotations

from ddpsim.app.whatif import AS_RECORDED, Base
from ddpsim.experiments import worldsize
from ddpsim.trace import Trace


def calibration_key(trace: Trace | None) -> str:
    """Which network calibration ``trace`` carries (a measurement here changes it): part of cache keys."""
    cal = (trace.meta.get("calibration") if trace is not None else None) or {}
    return ",".join(sorted(str(k) for k in (cal.get("world_sizes") or {}))) + str(cal.get("measured_for", ""))


def as_recorded(network: str | None) -> bool:
    """The network control left at the recording's own (fitted or measured), not a datasheet profile."""
    return network in (AS_RECORDED, None, "")


def world_plan(base: Base, trace: Trace | None, world_size: int, network: str) -> worldsize.Plan | None:
    """What another world size than the recorded one does (Note [Another world size on the user's path]),
    or None where it needs nothing (a GPU model, a chosen network, the recorded world size)."""
    if base.kind != "trace" or not as_recorded(network) or trace is None:
        return None
    plan = worldsize.plan(trace, int(world_size))
    return None if plan.action == "recorded" else plan


def recorded_size_note(trace: Trace | None, world_size: int, network: str) -> str | None:
    """At the recorded world size and network after a measurement here: the allreduce is priced from it
    (Note [Calibrate alone] in learn/linkfit.py), not from the recording's own collectives; else None."""
    if (trace is None or not as_recorded(network) or int(world_size) != trace.world_size
            or not worldsize.is_local_cpu_run(trace)):
        return None
    sizes = sorted(worldsize.measured_sizes(trace.meta.get("calibration")))
    if trace.world_size not in sizes:
        return None
    return (f"World size {trace.world_size}: the allreduce is priced from the measurement made here at "
            f"{' and '.join(map(str, sizes))} ranks (several message sizes), no longer from the recording's own "
            "collectives, so the numbers differ from before the measurement.")


def measured_at(trace: Trace, world_size: int) -> str:
    """Which world sizes ``measure_network`` times, in words: the trace's and ``world_size``, or the
    most this host measures, with ``world_size`` from the fit through them (``worldsize.measurable``)."""
    top = worldsize.measurable(int(world_size))
    sizes = " and ".join(map(str, sorted({trace.world_size, top})))
    return f"{sizes} ranks" + ("" if top == world_size else f", and {world_size} from the fit through them")


def measure_network(trace: Trace, world_size: int) -> dict:
    """Measure the allreduce at ``world_size`` here and keep it in the trace (``worldsize.measure``)."""
    return worldsize.measure(trace, int(world_size))
