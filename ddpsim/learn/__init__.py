"""ddpsim.learn: learning a simulator Workload from a recorded trace.

    >>> from ddpsim.learn import learn, replay_config, simulate
    >>> run = load_trace("run.json")
    >>> w = learn(run)                                   # what every prediction starts from
    >>> trace, summary = simulate(w, replay_config(w, run))              # the run, replayed
    >>> trace, summary = simulate(w, replay_config(w, run, bucket_cap_mb=5))   # a what-if

Modules: extract (trace -> Workload: compute, gradient order, link), noise (the
recorded ranks micro-step by micro-step, for a replay), contention
(gloo's rings sharing a core with compute), linkfit (the link's line from the
recorded collectives), refine (one fixed-point step against the recorded phases),
jitter (the rank-speed spread that reproduces a recorded run).

``simulate`` and ``sweep`` here are ``ddpsim.sim``'s, taking a Workload *or* a
recorded Trace (whose workload is learnt first with ``learn``); ``sweep`` on a Trace with
a dict of changes replays the run, as ``sweep --trace`` and the What-if page do.
"""
from __future__ import annotations

import dataclasses

from ddpsim.analysis.busy import busy_patterns
from ddpsim.learn.extract import config_from_trace, replay_config, workload_from_trace
from ddpsim.learn.refine import measure_alone, refine
from ddpsim.sim import api as _api
from ddpsim.sim.sweep import planned as _sim_planned
from ddpsim.sim.sweep import sweep as _sim_sweep
from ddpsim.sim.workload import Workload


def learn(trace, concurrency: int | None = None) -> Workload:
    """The workload that ``simulate``, ``validate``, ``sweep`` and the What-if page learn from a
    recorded run: extracted (``workload_from_trace``), then self-calibrated against the run's own
    phases with its recorded ranks in place (``refine``, Note [Self-calibration]), so that
    ``replay_config(w, trace)`` reproduces the run; with the compute alone measured where the run
    has it (Note [A run without collectives computes alone] in alone.py) and an import's busy GPU
    kernels (Note [The recorded busy time, stretched] in analysis/busy.py). ``concurrency``:
    collectives in flight at once instead of the backend's (``simulate --concurrency``)."""
    w = measure_alone(refine(workload_from_trace(trace, concurrency), trace), trace)
    return dataclasses.replace(w, busy=busy_patterns(trace))


def as_workload(source) -> Workload:
    """``source`` if it is a Workload, else the workload learnt from trace ``source`` (``learn``)."""
    return source if isinstance(source, Workload) else learn(source)


def simulate(source, config: _api.SimConfig | None = None, **overrides):
    """``ddpsim.sim.simulate`` on a Workload or a recorded Trace."""
    return _api.simulate(as_workload(source), config, **overrides)


def sweep(source, grid: dict, base: _api.SimConfig | dict | None = None, metric: str = "iteration_time_s",
          refused: list | None = None, trace=None, done: dict | None = None, progress=None):
    """``ddpsim.sim.sweep`` on a Workload or a recorded Trace.

    With a recorded run (``source``, or ``trace`` beside a workload learnt from it) and ``base`` a
    dict of SimConfig fields (or None), every combination is ``replay_config(w, run, **base,
    **values)``: the run's options and, at its world size, its recorded ranks (what ``validate``,
    ``sweep --trace`` and the What-if page simulate). A SimConfig ``base`` is a whole configuration,
    as ``simulate`` takes one: each combination is that SimConfig with the grid's values, on the
    learnt workload, without the run's options or ranks. Without a run, as ``ddpsim.sim.sweep``;
    ``done`` and ``progress`` as there."""
    w, base, make = _sweep_args(source, base, trace)
    return _sim_sweep(w, grid, base, metric, refused, make=make, done=done, progress=progress)


def planned(source, grid: dict, base: _api.SimConfig | dict | None = None, trace=None) -> set[str]:
    """The runs ``sweep`` with these arguments simulates (``ddpsim.sim.sweep.planned``), without simulating them."""
    w, base, make = _sweep_args(source, base, trace)
    return _sim_planned(w, grid, base, make)


def _sweep_args(source, base, trace):
    """``sweep``'s (workload, SimConfig base, make): see its docstring."""
    w = as_workload(source)
    run = source if trace is None and not isinstance(source, Workload) else trace
    if base is not None and not isinstance(base, (dict, _api.SimConfig)):
        raise TypeError(f"base must be a SimConfig or a dict of SimConfig fields, not {type(base).__name__}")
    if run is None or isinstance(base, _api.SimConfig):
        return w, _api.SimConfig(**base) if isinstance(base, dict) else base, None
    fields = dict(base or {})
    return w, None, lambda values: replay_config(w, run, **{**fields, **values})


__all__ = ["as_workload", "config_from_trace", "learn", "planned", "replay_config", "simulate", "sweep",
           "workload_from_trace"]
