"""ddpsim.learn: learning a simulator Workload from a recorded trace.

    >>> from ddpsim.learn import simulate, sweep, workload_from_trace
    >>> trace, summary = simulate(load_trace("run.json"), world_size=8)

Modules: extract (trace -> Workload: compute, gradient order, link), contention
(gloo's rings sharing a core with compute), linkfit (the link's line from the
recorded collectives), refine (one fixed-point step against the recorded phases),
jitter (the rank-speed spread that reproduces a recorded run).

``simulate`` and ``sweep`` here are ``ddpsim.sim``'s, taking a Workload *or* a
recorded Trace (whose workload is learnt first with ``workload_from_trace``).
"""
from __future__ import annotations

from ddpsim.learn.extract import config_from_trace, replay_config, workload_from_trace
from ddpsim.sim import api as _api
from ddpsim.sim.sweep import sweep as _sim_sweep
from ddpsim.sim.workload import Workload


def as_workload(source) -> Workload:
    """``source`` if it is a Workload, else the workload learnt from trace ``source``."""
    return source if isinstance(source, Workload) else workload_from_trace(source)


def simulate(source, config: _api.SimConfig | None = None, **overrides):
    """``ddpsim.sim.simulate`` on a Workload or a recorded Trace."""
    return _api.simulate(as_workload(source), config, **overrides)


def sweep(source, grid: dict, base: _api.SimConfig | None = None, metric: str = "iteration_time_s",
          refused: list | None = None):
    """``ddpsim.sim.sweep`` on a Workload or a recorded Trace."""
    return _sim_sweep(as_workload(source), grid, base, metric, refused)


__all__ = ["as_workload", "config_from_trace", "replay_config", "simulate", "sweep", "workload_from_trace"]
