"""Self-calibration: fit the residual terms a recorded run leaves after extraction (``refine``),
and the compute alone where the run measured it (``measure_alone``).

Note [Self-calibration]: ``extract.workload_from_trace`` turns each measured gap
into a cost *alone* on the core, and the network line comes from ``ddpsim
calibrate``. Simulating the calibration run with those numbers still missed
(validate grid, 2026-11-21, this 2-core machine):
- backward compute, short by up to ~8%: contention costs more than the
  shared-core model charges (cache and scheduler effects);
- the tail after the last gradient (the last allreduces, finalize_backward's wait
  and copy-back, the autograd engine's callback), ~3 ms short;
- with 4 ranks on 2 cores, forward and the optimizer step, up to ~50% long while
  the simulated ranks that share a core ran together at half speed (now they take
  turns, Note [Ranks take turns on a shared core], and the phases are within ~10%).
The phases are compared as medians of the time from the iteration's start to
each phase's end (``phase_medians``), which add up to the iteration's span.
So the calibration run is simulated with its own options, and the backward
compute and the forward and optimizer times are scaled and ``finalize_s`` is
shifted until the simulated phases match the measured ones (the end of the
optimizer step by ``finalize_s``: with ranks taking turns on a core, 1 ms more
finalize moves it ~2 ms, so a secant step, not a fixed-point one). Only the
calibration run is used; the runs being predicted never are.

Note [A no_sync step computes alone]: inside ``no_sync`` torch's reducer does nothing (its autograd
hook returns at once: ``expect_autograd_hooks_`` is false), so a no_sync micro-step's backward is the
compute alone, and on a CPU rank nothing of gloo runs beside it. The learnt compute is fitted to the
synced steps, where gloo's threads share the core and the shared-core model takes part of that time
out again: what is left is not the compute alone the no_sync steps measured, and each recorded
rank's no_sync multipliers (``learn/noise.py``, taken against the no_sync steps' own median) scale
that base. On a 2-rank run of a small MLP with BatchNorm, find_unused_parameters and a sync every 2
steps (2026-11-29), the replay played its no_sync backward at 7.2 ms against 3.2 ms recorded and
its forward at 3.5 against 2.2 ms, and missed the iteration time by +28.6%; on branchy
(``tests/fixtures/no_sync``) both were 24% short, and it missed by -11.1%. So ``fit_no_sync`` scales
the no_sync micro-steps' forward and backward (``Workload.no_sync_forward_scale``,
``no_sync_backward_scale``) until the replay's medians are the recorded ones: the two replays then
missed by +3.2% and +1.8%.
"""
from __future__ import annotations

import dataclasses

from ddpsim.analysis.phases import no_sync_medians, phase_medians
from ddpsim.learn import alone
from ddpsim.learn.extract import replay_config
from ddpsim.learn.jitter import pick_jitter
from ddpsim.sim.api import simulate
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace

ROUNDS = 4  # fixed-point rounds (finalize: secant steps)
NO_SYNC_ROUNDS = 2  # fit_no_sync's rounds: a no_sync step's compute is nearly proportional to its scale
ALONE_ROUNDS = 3  # measure_alone's fixed-point rounds: a bucket's launch cost is not scaled, so one ratio is not exact


def refine(w: Workload, trace: Trace, sim_iters: int | None = None, jitter: float | None = None,
           noise: str = "recorded") -> Workload:
    """``w`` with its compute scaled and finalize shifted so that ``trace`` is reproduced.

    The rank noise is the one the predictions will use, since noise lengthens the tail
    (every collective waits for the slowest rank): ``noise="recorded"``, the recorded
    ranks micro-step by micro-step over the recorded steps (Note [Replay the recorded
    ranks' speeds]); ``noise="drawn"``, ``jitter`` (default: the one measured in
    ``trace``, ``jitter_estimated``) over ``sim_iters`` steps (default 40).
    """
    real = phase_medians(trace)
    if noise == "drawn":
        iters = sim_iters or 40
        cfg = replay_config(w, trace, "drawn", iters=iters, jitter=pick_jitter(jitter, w, trace, iters))
    else:
        cfg = replay_config(w, trace, **({"iters": sim_iters} if sim_iters else {}))
    total = {"forward": 1.0, "compute": 1.0, "optimizer": 1.0, "finalize_shift_s": 0.0}

    def ratio(k, sim):
        return real[k] / sim[k] if sim[k] > 0 and real[k] > 0 else 1.0

    last = None  # (finalize_s, simulated tail + optimizer) of the previous round
    for _ in range(ROUNDS):
        sim = phase_medians(simulate(w, cfg)[0])
        f, c, o = ratio("forward", sim), ratio("compute", sim), ratio("optimizer", sim)
        after = sim["tail"] + sim["optimizer"]
        # the end moves ~1 s per s of finalize, ~2 s when two ranks share a core and take turns
        slope = 1.0
        if last is not None and abs(w.finalize_s - last[0]) > 1e-6:
            slope = min(4.0, max(0.5, (after - last[1]) / (w.finalize_s - last[0])))
        last = (w.finalize_s, after)
        fin = max(0.0, w.finalize_s + (real["tail"] + real["optimizer"] - after) / slope)
        shift = fin - w.finalize_s
        w = dataclasses.replace(w, grad_compute_s=[t * c for t in w.grad_compute_s], forward_s=w.forward_s * f,
                                optimizer_s=w.optimizer_s * o, finalize_s=fin, meta=dict(w.meta))
        total = {"forward": total["forward"] * f, "compute": total["compute"] * c,
                 "optimizer": total["optimizer"] * o, "finalize_shift_s": total["finalize_shift_s"] + shift}
    w = fit_no_sync(w, trace, cfg)
    w.meta["refined"] = {"compute_scale": total["compute"], "forward_scale": total["forward"],
                         "optimizer_scale": total["optimizer"], "finalize_shift_s": total["finalize_shift_s"],
                         "no_sync_forward_scale": w.no_sync_forward_scale,
                         "no_sync_backward_scale": w.no_sync_backward_scale}
    return w


def fit_no_sync(w: Workload, trace: Trace, cfg) -> Workload:
    """``w`` with its no_sync micro-steps' forward and backward scaled so that simulating ``cfg`` gives
    ``trace``'s no_sync medians (Note [A no_sync step computes alone]); ``w`` where either has none."""
    real = no_sync_medians(trace)
    for _ in range(NO_SYNC_ROUNDS if real else 0):
        sim = no_sync_medians(simulate(w, cfg)[0])
        if sim is None:
            return w
        fs, bs = (real[k] / sim[k] if sim[k] > 0 and real[k] > 0 else 1.0 for k in ("forward", "backward"))
        w = dataclasses.replace(w, no_sync_forward_scale=w.no_sync_forward_scale * fs,
                                no_sync_backward_scale=w.no_sync_backward_scale * bs, meta=dict(w.meta))
    return w


def measure_alone(w: Workload, trace: Trace) -> Workload:
    """``w`` with ``meta[alone.KEY]``, the factor per rank that makes a noop what-if's backward the
    compute alone ``trace`` measured, where it measured it on every rank (Note [A run without
    collectives computes alone] in alone.py): the recording's own noop what-if, simulated."""
    want = alone.alone_ns(w, trace)
    if not want or len(want) != trace.world_size:
        return w
    scale = {r: 1.0 for r in want}
    for _ in range(ALONE_ROUNDS):
        sim, _ = simulate(w, replay_config(w, trace, comm_hook="noop", synced_backward_scale=dict(scale)))
        got = alone.simulated_ns(sim)
        if set(got) != set(want) or not all(got.values()):
            return w
        scale = {r: scale[r] * want[r] / got[r] for r in want}
    return dataclasses.replace(w, meta={**w.meta, alone.KEY: {str(r): round(s, 6) for r, s in scale.items()}})
