"""A CPU recording whose ranks shared cores, in one line (``record``, ``import`` and the Timeline say it).

The recorder pins local rank r to CPU r % cpus (``meta.pinning``; Note [Recordings share the
machine's CPUs] in ddpsim/record/cpus.py). With more ranks on a host than cores, two ranks take
turns on one core, so each step's times include waiting for the operating system to run the rank,
which ranks with a core each, or a GPU each, do not pay. ddpsim does not model that scheduling for
other machines: the line says what the recorded times hold.
"""
from __future__ import annotations

from collections import Counter

from ddpsim.trace import Trace


def ranks_per_core(trace: Trace) -> tuple[int, int] | None:
    """(ranks on the busiest host, its cores) of a CPU recording whose ranks shared cores, else None."""
    pinning = trace.meta.get("pinning") or {}
    cpus = pinning.get("cpus")
    if trace.imported or trace.source == "simulated" or (trace.meta.get("placement") or {}).get("device", "cpu") != "cpu":
        return None
    if not isinstance(cpus, int) or cpus < 1:
        return None
    busiest = Counter(r.host for r in trace.ranks).most_common(1)
    per_host = busiest[0][1] if busiest else 0
    return (per_host, cpus) if per_host > cpus else None


def shared_cores_line(trace: Trace) -> str | None:
    """'4 ranks shared 2 CPU cores ...' for a recording whose ranks took turns on cores, else None."""
    if (found := ranks_per_core(trace)) is None:
        return None
    ranks, cpus = found
    hosts = {r.host for r in trace.ranks}
    where = "on one host" if len(hosts) <= 1 else "on the busiest host"
    return (f"{ranks} ranks shared {cpus} CPU core{'s' * (cpus != 1)} {where} (each rank pinned to one of them): "
            "ranks took turns on a core, so these times include waiting for the operating system to run each "
            "rank, which ranks with a core or a GPU each do not pay")
