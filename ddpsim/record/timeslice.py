"""The scheduler's time slice on this machine: how long a rank keeps a core it shares.

``ddpsim calibrate`` stores it (``time_slice_s``) beside the network lines, and the
CPU platform uses it where ranks outnumber cores (Note [Ranks take turns on a shared
core] in ``ddpsim/sim/core.py``).
"""
from __future__ import annotations

import os
import statistics
import time


SLICE_GAP_S = 200e-6  # s; a pause this long in a spinning loop means it lost the core


def _spin(cpu: int, seconds: float, queue) -> None:
    """Spin on ``cpu`` and report how long each turn on the core lasted (s)."""
    os.sched_setaffinity(0, {cpu})
    start = last = time.perf_counter()
    end, turns = start + seconds, []
    while last < end:
        t = time.perf_counter()
        if t - last > SLICE_GAP_S:  # descheduled between two readings: a turn ended
            turns.append(last - start)
            start = t
        last = t
    queue.put(turns[1:])  # the first turn began before the other process started


def time_slice(seconds: float = 1.0, cpu: int = 0) -> float:
    """The scheduler's time slice here: how long one of two busy processes pinned to
    the same core runs before the other gets it (median, s; 0 if never preempted).

    Note [Ranks take turns on a shared core] (core.py) uses it: with 4 ranks on 2
    cores, ranks 0 and 2 share CPU 0, and the kernel runs one of them for a slice
    (3.95 ms, quartiles 3.93-3.97, measured here 2026-11-21), not both at half speed.
    """
    from ddpsim import ranks
    from ddpsim.mainscript import script_hidden

    if not hasattr(os, "sched_setaffinity"):
        return 0.0
    ctx = ranks.process_context("forkserver")  # started in milliseconds, not seconds
    queue = ctx.Queue()
    procs = [ctx.Process(target=_spin, args=(cpu, seconds, queue), daemon=True) for _ in range(2)]
    try:
        for p in procs:
            with script_hidden():  # Note [A rank runs none of the caller's script]
                p.start()
        turns = [t for _ in procs for t in queue.get(timeout=seconds + 30)]
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.terminate()
    return statistics.median(turns) if turns else 0.0
