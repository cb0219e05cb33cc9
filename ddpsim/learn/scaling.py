"""A scaling curve's rows: one configuration at several world sizes, each iteration split in three.

The What-if page's curve (``ddpsim.app.scaling``) and ``python -m ddpsim scaling`` both build their rows
here. Each world size is simulated twice: with the rank-to-rank spread and without it (``quiet_config``).
The three parts add up to the iteration: compute (with the communication hidden under it), the
communication the quiet run leaves exposed (after the backward, and the buffers' broadcast before
each forward, which nothing overlaps: DDP's ``_sync_buffers`` waits for it), and the extra time the
spread costs, waiting for the slowest rank (Note [Waiting for the slowest rank] in sim/stragglers.py).

    rows = [split(ws, simulate, work, cfg_at(ws)) for ws in WORLD_SIZES]
    with_efficiency(rows)   # each rank's share of its 1-rank throughput, where 1 rank is a row
"""
from __future__ import annotations

from dataclasses import replace

from ddpsim.learn.noise import quiet_config
from ddpsim.sim.api import largest_nccl_choice

# ranks: the world sizes the What-if page's slider offers (with a recording's own) and its curve draws;
# the `scaling` command's default
WORLD_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 100_000)


def split(world_size: int, simulate_fn, work, cfg) -> dict:
    """One row: ``work`` simulated under ``cfg`` (at ``world_size`` ranks) by ``simulate_fn(work, cfg) ->
    (trace, summary)``, and again without its spread. Its keys: world_size, iteration_time_s = compute_s +
    exposed_comm_s + waiting_s, and nccl (the largest bucket's algorithm/protocol, "" where NCCL runs none).
    Every rank runs at the median speed, at a recording's own world size too (its ranks' lasting speeds,
    ``backward_scale``, are dropped): a curve has no step where the recorded ranks come back, and at the
    recorded size its row is the What-if's unchanged run (Note [The unchanged run is simulated as the what-if
    is] in app/whatif.py), where keeping them counted a lastingly slow rank as compute, not as waiting."""
    cfg = replace(cfg, backward_scale={})
    trace, s = simulate_fn(work, cfg)
    quiet = quiet_config(cfg, s)
    qtrace, q = simulate_fn(work, quiet) if quiet is not None else (trace, s)
    t = s["iteration_time_s"]
    waiting = max(0.0, t - q["iteration_time_s"])
    exposed = min(q["exposed_comm_s"] + broadcast_s(qtrace, q["steady_iterations"]), t - waiting)
    return {"world_size": world_size, "iteration_time_s": t, "compute_s": t - waiting - exposed,
            "exposed_comm_s": exposed, "waiting_s": waiting, "nccl": largest_nccl_choice(s)}


def broadcast_s(trace, iterations: list[int]) -> float:
    """Seconds per iteration the buffers' broadcast takes before the forward: over ``iterations``, the
    mean of each one's longest broadcast among the ranks (0 without ``broadcast_buffers`` or buffers)."""
    spans = [max((it.buffer_broadcast.complete_ns - it.buffer_broadcast.launch_ns for it in on
                  if it.buffer_broadcast is not None), default=0)
             for on in (trace.iteration_on_ranks(i) for i in iterations)]
    return sum(spans) / len(spans) * 1e-9 if spans else 0.0


def with_efficiency(rows: list[dict]) -> list[dict]:
    """``rows`` with ``efficiency``: the 1-rank row's iteration time over each row's (each rank's share of
    the throughput it has alone, at a fixed batch per rank); None for all where no row is of 1 rank."""
    one = next((r["iteration_time_s"] for r in rows if r["world_size"] == 1), None)
    for r in rows:
        r["efficiency"] = one / r["iteration_time_s"] if one else None
    return rows
