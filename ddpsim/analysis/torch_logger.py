"""The recording against torch's own DDP logger: the durations ``_get_ddp_logging_data()`` reports for
one iteration, beside the same durations measured from the recording.

Note [Torch's logger as a second clock]: torch's DDP times itself. In the sampled iterations (the
first ten, then every hundredth) its Reducer stamps five moments, and at the next synced forward its
Logger turns them into durations (Note [The runtime timer] in ddpsim/minddp/timer.py):

  forward_compute_time    forward start (``prepare_for_forward``) to the end of the forward
                          (``prepare_for_backward``)
  backward_compute_time   the end of the forward to the callback queued once every bucket is launched
  backward_comm_time      the first bucket's launch to the end of ``finalize_backward``
  overlap                 the first bucket's launch to that callback

The recorder times the same iteration with its own clock, on its own hooks: the forward span, the
gradients' ready times, each bucket's launch (and the end of that call), and the backward's return,
which comes after ``finalize_backward``. Measured with torch's definitions (the callback is no
earlier than the last gradient ready and the last launch's return), the two clocks must agree, up to
the few steps between torch's stamp and the recorder's. They do on every bundled torch recording
(six CPU runs on gloo, the H200 run on NCCL): every duration within 1.1 ms (the most, 3.1%, on the
forward, which the recorder starts at DDP's ``forward`` call, before ``_pre_forward``), the
communication within 0.17 ms (``tests/test_torch_logger.py``). On a busy CPU a preemption between
two stamps adds milliseconds, so ``selfcheck`` bounds the difference on the GPU only. A recording
made with ``--impl minddp`` carries minddp's logger, which mirrors torch's timer.
"""
from __future__ import annotations

from ddpsim.trace import Iteration, RankTrace, Trace

NS = 1e-9  # seconds per nanosecond
# logging-data key -> what the line calls it, in the order a step runs
KEYS = {"forward_compute_time": "forward", "backward_compute_time": "backward compute",
        "backward_comm_time": "communication", "backward_compute_comm_overlap_time": "overlap"}


def logged_iteration(rank: RankTrace) -> Iteration | None:
    """The synced iteration the rank's logging data times: its ``iteration`` key counts the synced
    forwards before the last logged one, which reported the synced iteration before it. None without
    timing keys or where that iteration was not recorded with buckets."""
    data = rank.ddp_logging_data or {}
    n = data.get("iteration")
    if not isinstance(n, int) or n < 1 or any(k not in data for k in KEYS):
        return None
    synced = [it for it in rank.iterations if it.sync]
    it = synced[n - 1] if n <= len(synced) else None
    return it if it is not None and it.buckets and all(b.launch_ns is not None for b in it.buckets) else None


def recorded_as_torch(it: Iteration) -> dict[str, float]:
    """The iteration's durations (seconds) measured as torch's logger measures them (module docstring)."""
    first_launch = min(b.launch_ns for b in it.buckets)
    compute_end = max([it.backward_compute_end_ns, *(b.launch_end_ns or b.launch_ns for b in it.buckets)])
    return {"forward_compute_time": (it.backward.start_ns - it.forward.start_ns) * NS,
            "backward_compute_time": (compute_end - it.backward.start_ns) * NS,
            "backward_comm_time": (it.backward.end_ns - first_launch) * NS,
            "backward_compute_comm_overlap_time": max(0, compute_end - first_launch) * NS}


def against_torch_logger(trace: Trace) -> list[dict]:
    """Per rank whose logging data times an iteration the recording has: the rank, the iteration, torch's
    durations and the recording's (seconds, keyed as the logging data)."""
    out = []
    for rank in trace.ranks:
        it = logged_iteration(rank)
        if it is not None:
            logged = {k: rank.ddp_logging_data[k] * NS for k in KEYS}
            out.append({"rank": rank.rank, "iteration": it.iteration, "torch": logged, "recorded": recorded_as_torch(it)})
    return out


def logger_line(trace: Trace) -> str | None:
    """One line for ``record``'s headline: torch's own timing of one iteration on the first rank beside the
    recording's, and the largest difference over the ranks; None where the logging data times nothing."""
    rows = against_torch_logger(trace)
    if not rows:
        return None
    first = rows[0]
    shown = ("forward_compute_time", "backward_compute_time", "backward_comm_time")
    worst = max(abs(r["torch"][k] - r["recorded"][k]) for r in rows for k in KEYS)
    return (f"torch's own DDP logger timed iteration {first['iteration']} on rank {first['rank']}: "
            + ", ".join(f"{KEYS[k]} {first['torch'][k] * 1e3:.1f} ms" for k in shown)
            + "; recorded " + ", ".join(f"{first['recorded'][k] * 1e3:.1f}" for k in shown)
            + f" ms (the largest difference over {len(rows)} rank{'s' * (len(rows) != 1)}: {worst * 1e3:.2f} ms)")
