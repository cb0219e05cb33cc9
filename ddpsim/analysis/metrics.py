"""Metrics: functions from a Trace to the headline numbers and tables.

One definition of each metric serves real and simulated traces alike: like for like.

Definitions (all per rank, then combined across ranks as stated):
- *iteration time*: from the earliest forward start on any rank to the latest iteration end
  (optimizer end, or backward end when no step is taken). Where no collective communicated (noop),
  the ranks' ends drift apart: then the slowest rank's own time, from its forward start or, where a
  buffer broadcast opens the cycle (an early rank's wait there is its last step's), the latest
  rank's. A *cycle* of no_sync every n micro-steps is the n micro-steps up to a synced one; the
  iteration time is its time / n, less the time between steps (Note [The time between steps is left out]).
- *backward compute end*: the time the last gradient became ready.
- *exposed communication*: time from the backward compute end to the last allreduce completion
  (buckets and the unused-parameter bitmap), clipped at 0; the maximum over ranks; per cycle,
  divided by the cycle's micro-steps.
- *overlap fraction*: HolisticTraceAnalysis's ``get_comm_comp_overlap``: the communication time
  that overlaps compute, over all communication time, per rank over the steady iterations (each
  iteration weighted by its communication time), then the mean over ranks (``comm_overlap``).
  Within an iteration the compute an allreduce can overlap is the backward up to its last
  gradient (DDP's finalize waits for the allreduces before the optimizer runs), so the overlapped
  part of an allreduce is its part before the backward compute end (``overlap_fraction``); an
  imported GPU profile's compute is its kernels' busy time instead (below); none at one rank.

Note [Compute is the GPU's busy kernels]: HTA takes compute to be the GPU's computation
kernels (every GPU op but NCCL's kernels, copies, memsets and syncs), merged. A recording
or a simulation has no kernels, and its compute runs all through the backward; an import
from a GPU profile has them, and keeps their busy time per iteration (``compute_busy``,
``ddpsim.trace.kineto.NOT_COMPUTE``). There an allreduce's overlapped part is its time
inside that busy time: HTA's own figure wherever the allreduce spans are its
communication kernels, and HTA's definition on the allreduce spans ddpsim imported where
there are none (gloo, which reduces on the host). On the bundled H100 ResNet-18 profiles
(two ranks sharing one GPU) the GPU idles between a rank's kernels: 62% through the
backward, and by its busy kernels far less (docs/accuracy.md).
- *steady state*: cycles that do not contain iteration 0 and whose layout is the final layout
  (so the iteration-0 single bucket and the rebuild are excluded); with PowerSGD, where later
  ones exist, also the synced steps before ``start_powerSGD_iter`` (its plain-allreduce warm-up)
  and its first compressing step, where powerSGD_hook sets itself up (error-feedback and P/Q
  memories, Q drawn at random);
  under Join, only those every rank trained where any is left (Note [The steady state of a Join
  run is every rank training] in analysis/join.py); in a partial trace, only those every rank
  recorded where any is left (``Trace.unfinished_iterations``).
"""
from __future__ import annotations

import statistics

from ddpsim.analysis.intervals import merged
from ddpsim.errors import PartialTraceError
from ddpsim.trace import Iteration, RankTrace, Trace

NS = 1e-9  # seconds per nanosecond


def cycles(trace: Trace) -> list[list[int]]:
    """Iteration numbers grouped into accumulation cycles, each ending in a sync (``Trace.longest_rank``'s)."""
    out, current = [], []
    for it in trace.longest_rank.iterations:
        current.append(it.iteration)
        if it.sync:
            out.append(current)
            current = []
    return out


def steady_cycles(trace: Trace, shadowed: bool = False) -> list[list[int]]:
    """Cycles in steady state (see the module docstring); never empty if any cycle exists. ``shadowed``:
    those where some rank only shadowed under Join too."""
    all_cycles = cycles(trace)
    r0 = trace.longest_rank
    final = r0.layouts[-1] if r0.layouts else None
    steady = [(k, c) for k, c in enumerate(all_cycles)  # k: the synced step's number
              if 0 not in c and all(r0.layout_at(i) is final for i in c)]
    start = powersgd_start(trace)  # synced step k compresses from k = start_powerSGD_iter on
    compressed = [c for k, c in steady if start is not None and k >= start]
    settled = [c for k, c in steady if start is not None and k > start]  # past PowerSGD's set-up step
    chosen = settled or compressed or [c for _, c in steady] or all_cycles[1:] or all_cycles
    unfinished = trace.unfinished_iterations  # once: a property over every iteration of every rank
    chosen = [c for c in chosen if not unfinished.intersection(c)] or chosen
    out = set() if shadowed else trace.shadowed_iterations
    return [c for c in chosen if not out.intersection(c)] or chosen


def powersgd_start(trace: Trace) -> int | None:
    """PowerSGD's ``start_powerSGD_iter`` where the run used PowerSGD (a recording's options, a
    simulation's config), else None."""
    opts, config = trace.meta.get("options") or {}, trace.meta.get("config") or {}
    if opts.get("comm_hook") != "powersgd" and config.get("comm_hook") != "powersgd":
        return None
    start = opts.get("powersgd_start_iter", config.get("powersgd_start_iter"))
    return start if type(start) is int else None


def comm_end_ns(it: Iteration) -> int | None:
    ends = [b.complete_ns for b in it.buckets]
    if it.bitmap_allreduce:
        ends.append(it.bitmap_allreduce.complete_ns)
    return max(ends) if ends else None


def exposed_comm_ns(it: Iteration) -> int:
    end = comm_end_ns(it)
    return 0 if end is None else max(0, end - it.backward_compute_end_ns)


def comm_spans(it: Iteration) -> list[tuple[int, int]]:
    """The iteration's collectives in flight: its buckets' allreduces and the used-parameter bitmap."""
    spans = [(b.launch_ns, b.complete_ns) for b in it.buckets]
    if it.bitmap_allreduce:
        spans.append((it.bitmap_allreduce.launch_ns, it.bitmap_allreduce.complete_ns))
    return spans


def hidden_comm_ns(it: Iteration) -> tuple[int, int]:
    """(in-flight allreduce time inside the compute, all in-flight allreduce time) of one iteration,
    in ns: the compute is the backward up to its compute end or, from a GPU profile, its busy
    kernels (Note [Compute is the GPU's busy kernels])."""
    comm = merged(comm_spans(it))
    lo, until = it.forward.start_ns, it.backward_compute_end_ns if it.compute_busy is None else it.end_ns
    hidden = sum(b - a for s, e in comm for a, b in it.busy(max(s, lo), min(e, until)))
    return hidden, sum(e - s for s, e in comm)


def overlap_fraction(it: Iteration) -> float | None:
    """One iteration's communication overlapped with compute (``hidden_comm_ns``), as a fraction;
    None without a collective."""
    hidden, union = hidden_comm_ns(it)
    return hidden / union if union > 0 else None


def comm_weighted_overlap(rank: RankTrace, iterations: set[int] | None = None) -> float | None:
    """One rank's overlap fraction over several iterations, weighted by communication time
    (the hidden allreduce time over all in-flight time), as HTA's ``get_comm_comp_overlap``
    reports it for the rank."""
    picked = rank.iterations if iterations is None else (rank.iteration(i) for i in iterations)  # not a scan per call
    both = [hidden_comm_ns(it) for it in picked if it is not None]
    union = sum(u for _, u in both)
    return sum(h for h, _ in both) / union if union else None


def enqueue_gap(trace: Trace, iteration: int) -> dict | None:
    """On a GPU trace (``meta.timebase``): how long after the host queued a gradient's work
    (its hook ran, ``cpu_t_ns``) the GPU finished it (``t_ns``), in ms; None without CPU times."""
    gaps = [(g.t_ns - g.cpu_t_ns) / 1e6 for it in trace.iteration_on_ranks(iteration)
            for g in it.grad_ready if g.cpu_t_ns is not None]
    if not gaps:
        return None
    return {"median_ms": statistics.median(gaps), "max_ms": max(gaps), "n": len(gaps)}


def rank_overlaps(trace: Trace, iterations: set[int]) -> list[float]:
    """Each rank's overlap fraction (``comm_weighted_overlap``), left out where its collectives took no
    time (noop); empty when none communicated, and at one rank (Note [One rank communicates nothing]:
    NCCL runs no kernel, HTA finds nothing to overlap; a recording's 10-16 us spans there read 94%)."""
    if trace.world_size == 1:
        return []
    return [f for f in (comm_weighted_overlap(r, iterations) for r in trace.ranks) if f is not None]


def mean_overlap(fractions: list[float]) -> float:
    """The overlap fraction (module docstring), HTA's: the mean of ``rank_overlaps``; 0.0 without any."""
    return statistics.mean(fractions) if fractions else 0.0


def comm_overlap(trace: Trace, iterations: set[int]) -> float:
    """The overlap fraction of ``iterations`` (module docstring); 0.0 without communication."""
    return mean_overlap(rank_overlaps(trace, iterations))


def _cycle_on_ranks(trace: Trace, cycle: list[int]) -> list[dict]:
    """Per rank that ran every micro-step of ``cycle``: micro-step -> its Iteration."""
    per_rank = [{i: r.iteration(i) for i in cycle} for r in trace.ranks]
    return [m for m in per_rank if all(m[i] is not None for i in cycle)]


def _between_micro_steps_ns(m: dict, cycle: list[int]) -> int:
    """One rank's time between the micro-steps of ``cycle``: each one's end to the next one's forward
    start (Note [The time between steps is left out])."""
    return sum(max(0, m[b].forward.start_ns - m[a].end_ns) for a, b in zip(cycle, cycle[1:]))


def between_micro_steps_ns(trace: Trace, cycle: list[int]) -> int:
    """The time between the micro-steps of ``cycle`` that every rank spent there (the least of the
    ranks'; 0 for a cycle of one synced step)."""
    return min((_between_micro_steps_ns(m, cycle) for m in _cycle_on_ranks(trace, cycle)), default=0)


def cycle_metrics(trace: Trace, cycle: list[int]) -> dict:
    """Iteration time, exposed comm and overlap for one cycle (seconds, fraction).

    Note [The time between steps is left out]: the iteration time runs from a forward's start to
    the step's end, so the time before the next forward (data loading, the rest of the training
    loop: ``analysis/period.py``) is not in it. A no_sync cycle leaves out the same time between its
    micro-steps: the time every rank spent there (the least of the ranks'; what one rank spent
    beyond that, the others waited for at the synced step). Counted in, a what-if of ``no_sync``
    on a GPU profile with 29 ms between steps read +71% for steps no slower than before."""
    present = _cycle_on_ranks(trace, cycle)
    fractions = rank_overlaps(trace, set(cycle))
    between = [_between_micro_steps_ns(m, cycle) for m in present]
    if fractions:  # a collective ends the ranks' cycle together: from the first start to the last end
        span = (max(m[cycle[-1]].end_ns for m in present) - min(m[cycle[0]].forward.start_ns for m in present)
                - min(between))
    else:  # nothing ties the ranks' ends (noop): the slowest rank's own cycle, from a broadcast tying the starts
        opens = [m[cycle[0]] for m in present]
        tied = max(it.forward.start_ns for it in opens) if all(it.buffer_broadcast for it in opens) else 0
        span = max(m[cycle[-1]].end_ns - max(tied, o.forward.start_ns) - g for m, o, g in zip(present, opens, between))
    synced = [m[cycle[-1]] for m in present]
    return {
        "iteration_time_s": span * NS / len(cycle),
        "exposed_comm_s": max(exposed_comm_ns(it) for it in synced) * NS / len(cycle),
        "overlap_fraction": mean_overlap(fractions),
    }


def _steady_rows(trace: Trace) -> tuple[list, list[dict]]:
    """The steady cycles and each one's metrics; PartialTraceError when there is none."""
    chosen = steady_cycles(trace)
    if not chosen:
        raise PartialTraceError(f"nothing to summarise: {holds(trace)}")
    return chosen, [cycle_metrics(trace, c) for c in chosen]


def summarize(trace: Trace) -> dict:
    """The headline numbers for any trace, real or simulated: iteration time and exposed
    communication, medians over the steady cycles; the overlap fraction, HTA's over them; and
    whether any collective took time in them (``communicates``)."""
    chosen, rows = _steady_rows(trace)
    out = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    steady = [i for c in chosen for i in c]
    fractions = rank_overlaps(trace, set(steady))
    out["overlap_fraction"] = mean_overlap(fractions)
    out["communicates"] = bool(fractions)  # False: an overlap of 0 means "nothing to overlap"
    out["steady_iterations"] = steady
    out["per_bucket"] = bucket_table(trace, chosen[-1][-1])
    return out


def steady_summary(trace: Trace) -> dict | None:
    """``summarize(trace)``, or None when the trace has no synced iteration (e.g. a partial run)."""
    try:
        return summarize(trace)
    except ValueError:
        return None


def spread(trace: Trace) -> dict:
    """How much single steady-state iterations vary: per metric, median, min, max over cycles.

    ``rel`` is the half-range over the median (0.1: iterations vary by about +-10%);
    ``n`` the number of steady cycles it is taken over (few cycles: a rough figure).
    """
    _, rows = _steady_rows(trace)
    out = {}
    for k in rows[0]:
        values = [r[k] for r in rows]
        med = statistics.median(values)
        out[k] = {"median": med, "min": min(values), "max": max(values), "n": len(values),
                  "rel": (max(values) - min(values)) / 2 / med if med else 0.0}
    return out


def holds(trace: Trace) -> str:
    """What a trace holds, in words, for partial traces: 'rank 0: 2 iterations, none synced; rank 1: ...'."""
    parts = []
    for r in trace.ranks[:4]:
        synced = sum(it.sync for it in r.iterations)
        state = "" if r.complete else " (incomplete)"
        parts.append(f"rank {r.rank}{state}: {len(r.iterations)} iteration(s), {synced} synced")
    more = f"; {len(trace.ranks) - 4} more ranks" if len(trace.ranks) > 4 else ""
    return "; ".join(parts) + more


def bucket_table(trace: Trace, iteration: int) -> list[dict]:
    """Per bucket at one iteration (rank-mean): bytes, ready -> launch wait, comm time.

    ``wait_s`` is how long a ready bucket waited for lower-indexed buckets to
    launch first (DDP launches strictly in bucket order).
    """
    rows: dict[int, list] = {}
    for it in trace.iteration_on_ranks(iteration):
        for b in it.buckets:
            rows.setdefault(b.bucket, []).append(b)
    table = []
    for index in sorted(rows):
        evs = rows[index]
        table.append({
            "bucket": index,
            "bytes": evs[0].bytes,
            "wait_s": statistics.mean(e.launch_ns - e.ready_ns for e in evs) * NS,
            "comm_s": statistics.mean(e.complete_ns - e.launch_ns for e in evs) * NS,
        })
    return table


def grad_ready_order(trace: Trace, rank: int = 0, iteration: int = 0) -> list[int]:
    """Parameter indices in the order their gradients became ready."""
    it = trace.ranks[rank].iteration(iteration)
    if it is None:
        raise KeyError(f"rank {rank} has no iteration {iteration}")
    return [g.param for g in sorted(it.grad_ready, key=lambda g: g.t_ns)]
