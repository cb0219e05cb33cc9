"""Bounded simulations: option ranges, the work estimate, and an event loop that stops.

Note [Bounded simulations]: a simulation's work is its events: per rank actor and
micro-step, every gradient-ready event and a few spans; per synced step, each
bucket's ready, launch and complete. ``simulate`` estimates them before it plans
anything (so ``--iters 1000000000`` is refused in a millisecond, not after 40 s
and a MemoryError) and refuses an estimate over ``SimConfig.max_events`` with
the estimate and the limit. Option ranges come first: values far outside what a
cluster has (a latency of 1e300 us, 1e-300 Gbit/s) break the floating-point
arithmetic of the event loop (at t = 1e300 s a 1 us step does not change t), so
they are refused with one line naming the option. Last, ``run_bounded`` runs the
event loop itself and stops past a multiple of the estimate or a wall-clock
limit (the dashboard's), so nothing spins.
"""
from __future__ import annotations

import math
import time

import simpy

from ddpsim.errors import CLIError
from ddpsim.sim.workload import Workload

# Option ranges (Note [Bounded simulations]): beyond them a simulation means nothing or never ends.
LIMITS = {  # field -> (lowest, highest, unit)
    "world_size": (1, 10_000_000, "ranks"), "iters": (1, 1_000_000, "synced steps"),
    "no_sync_every": (1, 1_000_000, "micro-steps"), "jitter": (0.0, 10.0, "coefficient of variation"),
    "bandwidth_gbps": (1e-3, 1e6, "Gbit/s"), "latency_us": (0.0, 1e6, "microseconds"),
    "concurrency": (1, 64, "collectives"), "interference": (0.0, 100.0, "x slowdown"),
    "first_bucket_cap_mb": (1e-6, 1e6, "MiB"),  # bucket_cap_mb(_list): what torch takes (ddpsim.buckets)
    "max_events": (1, 10**12, "events"), "time_limit_s": (1e-3, 86_400.0, "seconds"),
}
STRAGGLER_MAX = 1e3  # a rank at most this many times slower
DEFAULT_MAX_EVENTS = 2_000_000  # model events; up to about a minute of simulation on one core here
RUN_EVENTS_PER_ESTIMATED = 4  # simpy events allowed per estimated model event while running (measured 0.06-3)


class SimulationTooLarge(CLIError):
    """A simulation refused before it ran (its estimated work is over the budget) or stopped while running."""


def check_ranges(cfg) -> None:
    """Every SimConfig option within its range (LIMITS), or one line naming the option (Note [Bounded simulations])."""
    for name, (lo, hi, unit) in LIMITS.items():
        v = getattr(cfg, name)
        if v is None:
            continue
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi
        if not ok:
            flag = "--time-limit" if name == "time_limit_s" else "--" + name.replace("_", "-")
            raise ValueError(f"{flag} must be between {_num(lo)} and {_num(hi)} {unit}, not {v!r}")


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def count_actors(cfg, explicit: bool) -> int:
    """How many actors ``plan_actors`` will create (without drawing their factors)."""
    alone = len(set(cfg.stragglers) | set(cfg.backward_scale) | set(cfg.synced_backward_scale)
                | set(cfg.recorded_ranks))
    others = cfg.world_size - alone
    if others <= 0:
        return alone
    if cfg.jitter > 0 and cfg.jitter_mode == "expected" and not explicit:
        return alone + 1
    if cfg.jitter == 0 and not (explicit and others <= cfg.max_explicit_ranks):
        return alone + 1
    if cfg.one_by_one(others, explicit):
        return alone + others
    return alone + 1 + min(cfg.sampled_ranks(explicit), others - 1) + 1


def estimate_events(w: Workload, cfg, explicit: bool, link=None) -> int:
    """Model events the simulation will play, before planning it (see ``model_events`` in simulate).

    Per actor and micro-step: every gradient-ready event and 4 spans; per synced
    step: each bucket's ready, launch and complete. Buckets are at most the
    parameters, and about total bytes / cap. With ranks taking turns on shared
    cores (``link.time_slice_s``), a turn per time slice of each rank's compute:
    a 4-rank transformer on 2 cores ran past the estimate without them.
    """
    turns = 0
    if link is not None and link.cpus and link.time_slice_s > 0:
        busy = w.forward_s + w.backward_compute_s + w.optimizer_s + w.finalize_s
        turns = cfg.world_size * cfg.iters * cfg.no_sync_every * (2 + int(2 * busy / link.time_slice_s))
    caps = cfg.bucket_capacity()
    cap = min(caps.per_bucket_bytes_caps or [caps.bucket_bytes_cap])
    total = sum(p.bytes for p in w.params)
    buckets = len(w.params) if cfg.naive or cap <= 0 else min(len(w.params), 2 + int(total // cap))
    micro = cfg.iters * cfg.no_sync_every
    return count_actors(cfg, explicit) * (micro * (len(w.ready_order) + 4) + cfg.iters * 3 * max(buckets, 1)) + turns


EVENTS_PER_S = 200_000  # simpy events a simulation plays per second (145k-222k on the 2-core CI VM, 2026-11-29)


def seconds_for(simpy_events: int) -> float:
    """About how long simulations of ``simpy_events`` events in all take here (``EVENTS_PER_S``)."""
    return simpy_events / EVENTS_PER_S


def run_bounded(env: simpy.Environment, max_events: int, time_limit_s: float | None) -> None:
    """``env.run()``, stopped with SimulationTooLarge past ``max_events`` events or ``time_limit_s``."""
    start, steps = time.monotonic(), 0
    step, peek = env.step, env.peek
    while peek() != math.inf:
        step()
        steps += 1
        if steps % 4096 == 0:
            if steps > max_events:
                raise SimulationTooLarge(f"the simulation stopped after {steps:,} events, past its "
                                         f"estimate; the limit is {max_events:,}")
            if time_limit_s is not None and time.monotonic() - start > time_limit_s:
                raise SimulationTooLarge(f"the simulation stopped after {time_limit_s:g} s "
                                         f"({steps:,} events); simulate fewer iterations or ranks")
