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
earlier than the last gradient ready and the last launch's return; static_graph's first iteration
stamps the compute end and the comm start together, as ``delay_all_reduce`` begins after the last
gradient), the two clocks must agree, up to the few steps between torch's stamp and the recorder's.
They do on every bundled torch recording (six CPU runs on gloo, the H200 run on NCCL): every
duration within 1.1 ms, the communication within 0.17 ms (``tests/test_torch_logger.py``). The
forward and the backward compute differ most, by nearly equal and opposite amounts: the recording's
forward ends after the loss, which torch counts as backward compute. On a busy CPU a preemption
between two stamps adds milliseconds, so ``selfcheck`` bounds the difference on the GPU only. A
recording made with ``--impl minddp`` carries minddp's logger, which mirrors torch's timer.

Not compared: an iteration whose logging data holds an error (its ``iteration`` key is then the
count at the error, not the iteration timed), a host-timed iteration without the launches' return
times (recordings older than ``launch_end_ns``), and a CUDA run the recorder timed on the host (a
Python comm hook on the GPU: torch's timer there records CUDA events).
"""
from __future__ import annotations

from ddpsim.trace import Iteration, RankTrace, Trace
from ddpsim.trace.checks import is_int64

NS = 1e-9  # seconds per nanosecond
# logging-data key -> what the line calls it, in the order a step runs
KEYS = {"forward_compute_time": "forward", "backward_compute_time": "backward compute",
        "backward_comm_time": "communication", "backward_compute_comm_overlap_time": "overlap"}


def logged_iteration(trace: Trace, rank: RankTrace) -> Iteration | None:
    """The synced iteration the rank's logging data times: its ``iteration`` key counts the synced
    forwards before the last logged one, which reported the synced iteration before it. None where
    there is nothing to compare (the Note's last paragraph)."""
    data = rank.ddp_logging_data or {}
    n = data.get("iteration")  # the reader checks these keys' types; a trace built in memory is not read
    if not is_int64(n) or n < 1 or not all(is_int64(data.get(k)) for k in KEYS) or data.get("has_error"):
        return None
    host_timed = (trace.meta.get("timebase") or {}).get("backward") != "gpu"
    if host_timed and (trace.meta.get("placement") or {}).get("device") == "cuda":
        return None
    synced = [it for it in rank.iterations if it.sync]
    it = synced[n - 1] if n <= len(synced) else None
    if it is None or not it.buckets or any(b.launch_ns is None for b in it.buckets):
        return None
    return None if host_timed and any(b.launch_end_ns is None for b in it.buckets) else it


def recorded_as_torch(it: Iteration, delayed: bool = False) -> dict[str, float]:
    """The iteration's durations (seconds) measured as torch's logger measures them (the Note);
    ``delayed``: static_graph's first iteration, reduced by ``delay_all_reduce``."""
    first_launch = min(b.launch_ns for b in it.buckets)
    compute_end = max([it.backward_compute_end_ns, *(b.launch_end_ns or b.launch_ns for b in it.buckets)])
    if delayed:  # delay_all_reduce stamps both as it begins, once the last gradient is ready
        compute_end = first_launch = it.backward_compute_end_ns
    return {"forward_compute_time": (it.backward.start_ns - it.forward.start_ns) * NS,
            "backward_compute_time": (compute_end - it.backward.start_ns) * NS,
            "backward_comm_time": (it.backward.end_ns - first_launch) * NS,
            "backward_compute_comm_overlap_time": max(0, compute_end - first_launch) * NS}


def against_torch_logger(trace: Trace) -> list[dict]:
    """Per rank whose logging data times an iteration the recording has: the rank, the iteration, torch's
    durations and the recording's (seconds, keyed as the logging data)."""
    out = []
    for rank in trace.ranks:
        it = logged_iteration(trace, rank)
        if it is not None:
            data = rank.ddp_logging_data
            delayed = bool(data.get("static_graph")) and it is next(i for i in rank.iterations if i.sync)
            out.append({"rank": rank.rank, "iteration": it.iteration, "torch": {k: data[k] * NS for k in KEYS},
                        "recorded": recorded_as_torch(it, delayed)})
    return out


def largest_difference(rows: list[dict], keys=KEYS) -> float:
    """The largest |torch - recorded| (seconds) over ``rows`` and ``keys``."""
    return max((abs(r["torch"][k] - r["recorded"][k]) for r in rows for k in keys), default=0.0)


def disagreements(rows: list[dict], seconds: float, share: float) -> list[str]:
    """One line per duration that differs from torch's by more than ``seconds`` and ``share`` of torch's."""
    return [f"rank {r['rank']} iteration {r['iteration']}: {name} {r['recorded'][k] * 1e3:.2f} ms recorded, "
            f"{r['torch'][k] * 1e3:.2f} ms by torch's own DDP logger"
            for r in rows for k, name in KEYS.items()
            if abs(r["torch"][k] - r["recorded"][k]) > max(seconds, share * r["torch"][k])]


def logger_line(trace: Trace) -> str | None:
    """One line for ``record``'s headline: torch's own timing of one iteration on the first rank beside the
    recording's, and the largest difference over the ranks; None where the logging data times nothing."""
    rows = against_torch_logger(trace)
    if not rows:
        return None
    first = rows[0]
    shown = ("forward_compute_time", "backward_compute_time", "backward_comm_time")
    worst = largest_difference(rows)
    return (f"torch's own DDP logger timed iteration {first['iteration']} on rank {first['rank']}: "
            + ", ".join(f"{KEYS[k]} {first['torch'][k] * 1e3:.1f} ms" for k in shown)
            + "; recorded " + ", ".join(f"{first['recorded'][k] * 1e3:.1f}" for k in shown)
            + f" ms (the largest difference over {len(rows)} rank{'s' * (len(rows) != 1)}: {worst * 1e3:.2f} ms)")
