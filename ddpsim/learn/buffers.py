"""DDP's buffer broadcast in a recorded run: the buffers' size and what one broadcast cost.

Note [Buffers follow rank 0] in ``ddpsim/minddp/ddp.py`` says when DDP broadcasts them; the
simulator plays the broadcast with these numbers (``Workload.buffer_bytes``,
``Workload.buffer_broadcast_s``).
"""
from __future__ import annotations

import statistics

from ddpsim.trace import Trace


def buffer_bytes(trace: Trace) -> int:
    """Bytes of the module's buffers: as broadcast in the recording, else as the recorder counted
    them (``meta.buffer_bytes``; a run without broadcasts), else 0 (not known: none simulated)."""
    sent = [it.buffer_broadcast.bytes for r in trace.ranks for it in r.iterations if it.buffer_broadcast]
    if sent:
        return int(statistics.median_low(sent))
    counted = trace.meta.get("buffer_bytes")
    return counted if isinstance(counted, int) and not isinstance(counted, bool) and counted >= 0 else 0


def broadcast_seconds(trace: Trace) -> float | None:
    """Note [A broadcast learnt from the recording]: a recorded buffer broadcast lasts from the
    moment a rank calls it to the end, so it holds that rank's wait for the others. The rank that
    called it last waited for nobody: per iteration the shortest span over the ranks is the
    broadcast itself, and the median over iterations is its cost at the recorded world size (on
    this 2-core machine 2.7 KB took ~5 ms, the scheduler's wake-ups; the ring model said 0.02 ms).
    The simulator scales it to other world sizes with the link's model. None where no broadcast
    was recorded (the link's model alone)."""
    by_iteration: dict[int, list[int]] = {}
    for r in trace.ranks:
        for it in r.iterations:
            if it.buffer_broadcast:
                c = it.buffer_broadcast
                by_iteration.setdefault(it.iteration, []).append(c.complete_ns - c.launch_ns)
    full = [min(v) for v in by_iteration.values() if len(v) == len(trace.ranks)]
    return statistics.median(full) * 1e-9 if full else None


def has_buffers(trace: Trace | None) -> bool:
    """Whether the run's model has buffers DDP would broadcast (the What-if page's toggle)."""
    return trace is not None and buffer_bytes(trace) > 0
