"""The recorded ranks, micro-step by micro-step: what a replay plays instead of drawn noise.

Note [Replay the recorded ranks' speeds]: no two ranks compute an iteration in the
same time, and each collective waits for the slowest (``sim.model.allreduce``). A
Gaussian ``jitter`` draws that spread afresh; a *replay* of the recorded run can do
better and play each recorded rank as it was in each recorded micro-step: its forward
and its backward compute against the typical ones, and the time it spent between
iterations (data, logging, a profiler). The same iterations, the same stragglers, so
predicted and measured are compared like for like. On the eight bundled 2-rank samples
the drawn noise moved a replay from -17% to +29% with the seed alone: branchy, whose
ranks take different branches in alternate iterations, had a "jitter" of 0.95 and a
rank that started its forward 60 ms after the other, which no draw reproduces.

Per rank and micro-step ``i``: ``forward`` is the rank's forward time over the median
forward of all steady micro-steps of the same kind (synced or ``no_sync``: a synced
step's communication the simulator adds itself), ``backward`` the same for the backward
up to the last gradient, ``gap_s`` the seconds from the rank's previous micro-step's end
to this one's forward. Micro-steps outside the steady state (iteration 0, the rebuild)
take the rank's median values. ``SimConfig.recorded_ranks`` cycles the lists. Under Join the
simulator gives rank r the K x r fewer batches ``record --uneven K`` does: the recorded ranks are
played by the ranks given their batches, the one that trained the most micro-steps as rank 0
(``simulated_rank``), and every per-rank figure learnt is keyed by the simulated rank that plays
it: these lists, the backward speeds (``gradients.rank_factors``) and the backward alone
(``alone.alone_ns``). A recording whose rank 0 ran out of data, relabelled from the bundled Join
fixture, replayed its shadowed iterations at 25.3 ms by number and at 29.3 ms so, as the fixture
itself does; its noop what-if took 18.752 ms as the fixture's, 19.390 ms with the backward alone
keyed by recorded rank.

Where ranks shared CPU cores (more ranks than cores: ``Link.cpus``), their recorded times
hold the core sharing that the platform plays again (Note [Ranks take turns on a shared
core]), and a replay of them counts it twice: on a recorded grid (2026-11-25, 4 ranks on 2
cores) every 4-rank row came out 1-14% slow with them, +6.8% on average against +2.1% with
the drawn noise, while the 2-rank rows were alike (-2.0% and -2.0%). ``replay_config`` draws
the noise there.
"""
from __future__ import annotations

import statistics
from dataclasses import asdict

from ddpsim.sim import SimConfig
from ddpsim.trace import Iteration, Trace

LIMIT = 20.0  # the widest multiplier kept, either way (a micro-step 20x the median): outliers are clipped
NS = 1e-9


def _forward(it: Iteration) -> int:
    return it.forward_compute_ns


def _backward(it: Iteration) -> int:
    return max(0, it.backward_compute_end_ns - it.backward.start_ns)


def _typical(trace: Trace, steady: set[int], part) -> dict[bool, float]:
    """Synced / no_sync -> the median of ``part`` over every rank's steady micro-steps of that kind (ns)."""
    by_kind: dict[bool, list[int]] = {}
    for r in trace.ranks:
        for it in r.iterations:
            if it.iteration in steady and it.grad_ready:
                by_kind.setdefault(it.sync, []).append(part(it))
    return {k: statistics.median(v) for k, v in by_kind.items() if len(v) >= 2 and statistics.median(v) > 0}


def _ratio(value: float, typical: float) -> float:
    return round(min(LIMIT, max(1 / LIMIT, value / typical)), 4)


def simulated_rank(trace: Trace) -> dict[int, int]:
    """Recorded rank -> the simulated rank that plays it: itself, and under Join the ranks by how many
    micro-steps they trained, the most first (ties in rank order), as the simulator hands out batches
    (``sim/join.py``). Every per-rank figure a replay learns goes through it (``recorded_ranks``,
    ``rank_factors``, ``alone.alone_ns``)."""
    if not any(r.join is not None for r in trace.ranks):
        return {r.rank: r.rank for r in trace.ranks}
    return {r.rank: k for k, r in enumerate(sorted(trace.ranks, key=lambda r: -len(r.iterations)))}


def recorded_ranks(trace: Trace, steady: set[int]) -> dict[int, dict[str, list[float]]]:
    """Rank -> {"forward", "backward", "gap_s"} per recorded micro-step (Note [Replay the recorded
    ranks' speeds]); empty when the steady state holds too little to say."""
    typical = {"forward": _typical(trace, steady, _forward), "backward": _typical(trace, steady, _backward)}
    if not all(typical.values()):
        return {}
    # micro-step k of the replay is the k-th recorded iteration number (0, 1, 2... in a recording;
    # positions, not the numbers themselves, so the lists grow with the trace, not with its numbers)
    numbers = sorted({it.iteration for r in trace.ranks for it in r.iterations})
    out, playing = {}, simulated_rank(trace)
    for r in trace.ranks:
        own: dict[str, dict[int, float]] = {"forward": {}, "backward": {}, "gap_s": {}}
        prev = None
        for it in r.iterations:
            if it.iteration in steady and it.grad_ready and all(it.sync in t for t in typical.values()):
                own["forward"][it.iteration] = _ratio(_forward(it), typical["forward"][it.sync])
                own["backward"][it.iteration] = _ratio(_backward(it), typical["backward"][it.sync])
                if prev is not None and prev.iteration == it.iteration - 1:
                    own["gap_s"][it.iteration] = min(LIMIT, max(0, it.forward.start_ns - prev.end_ns) * NS)
            prev = it
        if not own["forward"]:
            return {}
        typical_here = {k: statistics.median(v.values()) if v else 0.0 for k, v in own.items()}
        out[playing[r.rank]] = {p: [v.get(i, typical_here[p]) for i in numbers] for p, v in own.items()}
    return dict(sorted(out.items()))


def level(recorded: dict) -> dict:
    """The same recorded micro-steps with the rank-to-rank spread taken out: in micro-step ``i``
    every rank's forward, backward and gap are the ranks' mean for ``i``. A slow spell of the
    machine stays (it slowed every rank and made nobody wait); what a replay loses against this
    is waiting for the slowest rank (``wait_s``)."""
    if not recorded:
        return {}
    ranks = list(recorded.values())
    n = min(len(r["forward"]) for r in ranks)
    mean = {k: [sum(r[k][i] for r in ranks) / len(ranks) for i in range(n)] for k in ("forward", "backward", "gap_s")}
    return {rank: {k: list(v) for k, v in mean.items()} for rank in recorded}


def quiet_config(cfg: SimConfig, summary: dict) -> SimConfig | None:
    """``cfg`` without its rank-to-rank spread: no drawn noise, or, for a replay of the recorded ranks,
    each micro-step's ranks levelled to their mean (``level``), and no rank named slow (``stragglers``,
    ``--straggler``: the others wait for it as for a drawn one); None where nobody waits for anybody
    (``summary``, simulated under ``cfg``, ran no collective) or there is no spread to take out."""
    if not summary.get("communicates", True):  # no collective: nobody waits for anybody
        return None
    quiet = {"stragglers": {}} if cfg.stragglers else {}
    if cfg.recorded_ranks:
        quiet["recorded_ranks"] = level(cfg.recorded_ranks)
    elif cfg.jitter:
        quiet["jitter"] = 0.0
    return SimConfig(**{**asdict(cfg), **quiet}) if quiet else None


def wait_s(simulate_fn, work, cfg: SimConfig, summary: dict) -> float:
    """Seconds per iteration of ``summary`` (simulated under ``cfg``) spent waiting for the slowest rank:
    against the same simulation without its spread (``quiet_config``)."""
    return wait_and_quiet(simulate_fn, work, cfg, summary)[0]


def wait_and_quiet(simulate_fn, work, cfg: SimConfig, summary: dict) -> tuple[float, dict]:
    """(``wait_s``, the summary of the simulation without the spread: ``summary`` itself where it has none)."""
    quiet = quiet_config(cfg, summary)
    if quiet is None:
        return 0.0, summary
    q = simulate_fn(work, quiet)[1]
    return max(0.0, summary["iteration_time_s"] - q["iteration_time_s"]), q


def steps_repeat(w, cfg: dict, steps: int) -> bool:
    """Whether a prediction's synced steps after the rebuild and PowerSGD's set-up all repeat exactly, so
    that ``steps`` of them (``extract.STEADY_ITERS``) give what more give: nothing drawn (no spread, or
    ``jitter_mode="expected"``'s one slowest rank), no GPU profile's busy kernels laid over the steps in turn
    (analysis/busy.py), no ranks taking turns on shared CPU cores (sim/core.py), no uneven inputs under Join,
    and PowerSGD, if any, past its set-up step within them (``analysis.metrics.steady_cycles``)."""
    drawn = cfg.get("jitter") and cfg.get("jitter_mode") != "expected"
    shared = w.link.cpus or w.link.shared_core or cfg.get("shared_core")
    start = int(cfg.get("powersgd_start_iter", SimConfig.powersgd_start_iter))  # compresses from step start on,
    late = cfg.get("comm_hook") == "powersgd" and start + 2 > steps  # settled from start + 1: steps 0..steps - 1
    return not (drawn or w.busy or shared or late or cfg.get("uneven") or cfg.get("join"))
