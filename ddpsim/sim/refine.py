"""Self-calibration: fit the residual terms a recorded run leaves after extraction.

Note [Self-calibration]: ``extract.workload_from_trace`` turns each measured gap
into a cost *alone* on the core, and the network line comes from ``ddpsim
calibrate``. Simulating the calibration run with those numbers still missed
(validate grid, 2026-11-21, this 2-core machine):
- backward compute, short by up to ~8%: contention costs more than the
  shared-core model charges (cache and scheduler effects);
- the tail after the last gradient (the last allreduces, finalize_backward's wait
  and copy-back, the autograd engine's callback), ~3 ms short;
- with 4 ranks on 2 cores, forward and the optimizer step, up to ~50% long: the
  simulated ranks that share a core start each iteration together, so their
  forwards (and steps) overlap completely; the real ones drift a few ms apart
  (Note [Ranks that share a CPU]).
So the calibration run is simulated with its own options, and the backward
compute and the forward and optimizer times are scaled and ``finalize_s`` is
shifted until the simulated phases match the measured ones. Only the
calibration run is used; the runs being predicted never are.
"""
from __future__ import annotations

import dataclasses
import statistics

from ddpsim.analysis import steady_cycles
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace

NS = 1e-9
ROUNDS = 3  # fixed-point rounds; the terms barely interact
PHASES = ("forward", "compute", "tail", "optimizer")


def phase_medians(trace: Trace) -> dict[str, float]:
    """Forward, backward compute, tail after the last gradient, optimizer step (s).

    Medians over steady iterations and ranks.
    """
    out: dict[str, list[float]] = {k: [] for k in PHASES}
    for cycle in steady_cycles(trace):
        for rank in trace.ranks:
            it = next((x for x in rank.iterations if x.iteration == cycle[-1]), None)
            if it is None:
                continue
            out["forward"].append(it.forward.duration_ns * NS)
            out["compute"].append((it.backward_compute_end_ns - it.backward.start_ns) * NS)
            out["tail"].append((it.backward.end_ns - it.backward_compute_end_ns) * NS)
            if it.optimizer:
                out["optimizer"].append(it.optimizer.duration_ns * NS)
    return {k: statistics.median(v) if v else 0.0 for k, v in out.items()}


def refine(w: Workload, trace: Trace, sim_iters: int = 40, jitter: float | None = None) -> Workload:
    """``w`` with its compute scaled and finalize shifted so that ``trace`` is reproduced.

    ``jitter``: the rank noise the predictions will use (default: the one measured
    in ``trace``, ``jitter_estimated``): noise lengthens the tail (every collective
    waits for the slowest rank), so the tail is fitted with it in place.
    """
    from ddpsim.sim.api import simulate
    from ddpsim.sim.extract import replay_config

    real = phase_medians(trace)
    jit = float(w.meta.get("jitter_estimated", 0.0)) if jitter is None else jitter
    cfg = replay_config(w, trace, iters=sim_iters, jitter=jit)
    total = {"forward": 1.0, "compute": 1.0, "optimizer": 1.0, "finalize_shift_s": 0.0}

    def ratio(k, sim):
        return real[k] / sim[k] if sim[k] > 0 and real[k] > 0 else 1.0

    for _ in range(ROUNDS):
        sim = phase_medians(simulate(w, cfg)[0])
        f, c, o = ratio("forward", sim), ratio("compute", sim), ratio("optimizer", sim)
        shift = real["tail"] - sim["tail"]
        w = dataclasses.replace(w, grad_compute_s=[t * c for t in w.grad_compute_s], forward_s=w.forward_s * f,
                                optimizer_s=w.optimizer_s * o, finalize_s=max(0.0, w.finalize_s + shift),
                                meta=dict(w.meta))
        total = {"forward": total["forward"] * f, "compute": total["compute"] * c,
                 "optimizer": total["optimizer"] * o, "finalize_shift_s": total["finalize_shift_s"] + shift}
    w.meta["refined"] = {"compute_scale": total["compute"], "forward_scale": total["forward"],
                         "optimizer_scale": total["optimizer"], "finalize_shift_s": total["finalize_shift_s"]}
    return w
