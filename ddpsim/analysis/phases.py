"""Phases of an iteration: the buffer broadcast, forward, backward compute, the tail after the last
gradient, the optimizer step."""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import NS, steady_cycles
from ddpsim.trace import Trace

PHASES = ("buffers", "forward", "compute", "tail", "optimizer")


def phase_medians(trace: Trace) -> dict[str, float]:
    """Buffer broadcast, forward, backward compute, tail after the last gradient, optimizer step (s).

    Each phase is the difference of two medians over steady iterations and ranks
    of the time from the rank's iteration start to the phase end, so the phases
    add up to the median span of an iteration (medians of the spans themselves
    would not: the spans vary by +-20% and not together).
    """
    ends: dict[str, list[float]] = {k: [] for k in PHASES}
    for cycle in steady_cycles(trace):
        for rank in trace.ranks:
            it = rank.iteration(cycle[-1])
            if it is None:
                continue
            t0 = it.forward.start_ns
            ends["buffers"].append((it.forward_compute_start_ns - t0) * NS)
            ends["forward"].append((it.forward.end_ns - t0) * NS)
            ends["compute"].append((it.backward_compute_end_ns - t0) * NS)
            ends["tail"].append((it.backward.end_ns - t0) * NS)
            ends["optimizer"].append(((it.optimizer.end_ns if it.optimizer else it.backward.end_ns) - t0) * NS)
    med = {k: statistics.median(v) if v else 0.0 for k, v in ends.items()}
    out, prev = {}, 0.0
    for k in PHASES:
        out[k], prev = max(0.0, med[k] - prev), med[k]
    return out


def no_sync_medians(trace: Trace) -> dict[str, float] | None:
    """The forward (its span without the buffer broadcast) and the backward up to its last gradient of the
    steady no_sync micro-steps, medians over them and every rank (s); None without any such step."""
    parts: dict[str, list[float]] = {"forward": [], "backward": []}
    steady = {i for c in steady_cycles(trace) for i in c}
    for rank in trace.ranks:
        for it in rank.iterations:
            if it.iteration in steady and not it.sync and it.grad_ready:
                parts["forward"].append(it.forward_compute_ns * NS)
                parts["backward"].append(max(0, it.backward_compute_end_ns - it.backward.start_ns) * NS)
    return {k: statistics.median(v) for k, v in parts.items()} if parts["forward"] else None
