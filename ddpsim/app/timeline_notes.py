"""What the Timeline page says beside its figure, without Streamlit: the import's own notes, whether an
iteration communicated at all, and what the GPU clock changed.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis import cycle_metrics, rank_overlaps, steady_cycles
from ddpsim.analysis.join import join_line
from ddpsim.analysis.torch_logger import KEYS, against_torch_logger
from ddpsim.trace import Trace

MATERIAL = 0.01  # a lag under this share of the iteration is a pixel or two on the Timeline: not worth a warning
NO_OVERLAP = "No collective communicated in this iteration (the noop hook, or one rank): there is nothing to overlap."


def import_notes(trace: Trace) -> str | None:
    """The import's ``meta.import_notes`` as one markdown block, each note once; None for a recording."""
    notes = list(dict.fromkeys(str(n) for n in trace.meta.get("import_notes") or []))
    if not trace.imported or not notes:
        return None
    files = ", ".join(trace.meta.get("imported_from") or []) or "a PyTorch profile"
    return (f"**Imported** from {files} with `ddpsim import`. What the import says about it:\n\n"
            + "\n".join(f"- {n}" for n in notes))


def join_note(trace: Trace, iteration: int) -> str | None:
    """Uneven inputs under Join (``record --uneven K --join``): the run's Join line, as ``record`` and ``simulate``
    print it, and the ranks that had run out of data by ``iteration``, which the figures above leave out."""
    if (line := join_line(trace)) is None:
        return None
    out = [r.rank for r in trace.ranks if r.join and any(s.iteration == iteration for s in r.join.shadows)]
    if not out:
        return f"{line}."
    who = f"rank {out[0]} has" if len(out) == 1 else f"ranks {', '.join(map(str, out[:-1]))} and {out[-1]} have"
    return (f"{line}. In iteration {iteration} {who} run out of data: no forward or backward, only zero-filled "
            "allreduces that shadow the others' (\"joined\" in the figure); the figures above are of the ranks "
            "still training.")


STEADY_HOW = {"iteration_time_s": "median over", "exposed_comm_s": "median over",
              "overlap_fraction": "HTA's overlap over"}


def reference(trace: Trace, iteration: int, steady: dict | None) -> dict | None:
    """The steady state to set ``iteration`` beside, like for like (None for a partial run).

    Note [One micro-step beside its like]: under no_sync (a sync every n micro-steps) the steady state
    (``steady``: ``steady_summary``) is per micro-step, a cycle's time and exposed communication over n,
    as the What-if and Compare pages give them. One synced micro-step carries the whole cycle's allreduce,
    so beside that average it always looked slow (sample 05: exposed 61.4 ms, "40.9 ms" over a steady
    20.5 ms). Here a micro-step is set beside the median of the steady micro-steps of its own kind,
    synced or not; ``per_step`` keeps the cycle's figures for the help text."""
    if steady is None:
        return None
    chosen = steady_cycles(trace)
    if all(len(c) == 1 for c in chosen):  # every step syncs: the steady state is per step already
        return {**steady, "kind": "", "per_step": None, "first": first_iteration(trace, chosen)}
    synced = any(it.sync for it in trace.iteration_on_ranks(iteration))
    same = [i for c in chosen for i in c if (i == c[-1]) == synced]
    rows = [cycle_metrics(trace, [i]) for i in same]
    return {"iteration_time_s": statistics.median(r["iteration_time_s"] for r in rows),
            "exposed_comm_s": statistics.median(r["exposed_comm_s"] for r in rows) if synced else None,
            "overlap_fraction": steady["overlap_fraction"] if synced else None,
            "communicates": steady["communicates"] and synced,
            "steady_iterations": same, "kind": "synced " if synced else "no_sync ",
            "per_step": (len(chosen[-1]), steady), "first": first_iteration(trace, chosen)}


def first_iteration(trace: Trace, chosen: list[list[int]]) -> str:
    """Why the run's first iteration is left out of the steady state (``chosen``: its cycles), from what it
    reduced: one bucket after the whole backward (torch's default and static_graph), or the buckets
    find_unused_parameters builds at construction and keeps (sample 04: 2 buckets); under no_sync, iteration 0
    reduces nothing and the first cycle's synced step is the one described. A profile that starts later
    (sample 10: iterations 4-6, its 3 buckets torch's rebuilt sizes) holds neither, and says where it starts."""
    rank = trace.longest_rank
    first = next((it for it in rank.iterations if it.sync), None)
    if first is None or not rank.iterations:
        return ""
    n, k = len(first.buckets), rank.iterations[0].iteration
    steady = {i for c in chosen for i in c}
    if k > 0:
        return _starts_later(trace, k, steady)
    if steady.intersection(range(k, first.iteration + 1)):
        return ""  # too few iterations to leave the first out: it is in the steady state
    what = "one bucket" if n == 1 else f"{n} buckets"
    if n and all(b.launch_ns >= first.backward_compute_end_ns for b in first.buckets):
        what += ", reduced after the whole backward"
    if rank.layouts and rank.layout_at(first.iteration) is not rank.layouts[-1]:
        what += ", before the rebuild"
    elif rank.layouts:
        what += " in the layout the run kept (no rebuild)"
    if first is rank.iterations[0]:
        return f"Iteration {k} is expected to differ: the first, with {what}."
    return (f"Iterations {k}..{first.iteration} are expected to differ: the first cycle, whose synced step "
            f"(iteration {first.iteration}) had {what}; its no_sync micro-steps reduced nothing.")


def _starts_later(trace: Trace, k: int, steady: set[int]) -> str:
    """A trace without iteration 0 (an imported profile): where it starts, and whether any of it is left out
    of the ``steady`` iterations."""
    held = {it.iteration for r in trace.ranks for it in r.iterations}
    whole = ", so none of its iterations is left out of the steady state" if held <= steady else ""
    what = "profile" if trace.imported else "trace"
    return f"The {what} starts at iteration {k}, after the run's first iteration and any rebuild{whole}."


def steady_help(ref: dict, key: str, fmt: str, scale: float) -> str:
    """A Timeline metric's help: the steady state it is set beside, and under no_sync the per-micro-step figure."""
    its = ref["steady_iterations"]
    which = (f"{its[0]}..{its[-1]}" if its == list(range(its[0], its[-1] + 1)) and len(its) > 2
             else ", ".join(map(str, its)))
    text = (f"Steady state ({STEADY_HOW[key]} the {ref['kind']}iteration{'s' * (len(its) > 1)} {which}): "
            f"{fmt.format(ref[key] * scale)}. {ref.get('first', '')}").rstrip()
    if ref["per_step"] and key != "overlap_fraction":
        n, steady = ref["per_step"]
        text += (f" The run synced every {n} micro-steps: per micro-step (a cycle's time over {n}, as the What-if "
                 f"and Compare pages give it) the steady state is {fmt.format(steady[key] * scale)}.")
    return text


def versus(ref: dict | None) -> str:
    """What a Timeline delta is against: the steady state, or under no_sync the steady micro-steps of its kind."""
    return f"vs steady {ref['kind']}micro-steps" if ref and ref["kind"] else "vs the steady state"


def communicates(trace: Trace, iteration: int) -> bool:
    """Whether any collective took time in ``iteration`` (an overlap of 0 otherwise means nothing)."""
    return bool(rank_overlaps(trace, {iteration}))


def gpu_clock_note(trace: Trace, gap: dict, iteration_s: float) -> str:
    """What the GPU clock changed against the CPU's (``gap``: ``analysis.enqueue_gap``), in words that
    follow its numbers: a lag is called material from ``MATERIAL`` of the iteration ``iteration_s``."""
    med, top = gap["median_ms"], gap["max_ms"]
    material = MATERIAL * iteration_s * 1e3
    when = "its AccumulateGrad op ended" if trace.imported else "its hook ran"  # cpu_t_ns: docs/trace-format.md
    head = "Times here are the GPU's."
    if med >= material:
        return (f"{head} The CPU ran ahead of the GPU: for each gradient, {when} a median {med:.2f} ms (up to "
                f"{top:.2f} ms) before the GPU finished it. A recorder that only reads CPU clocks would show the "
                "gradients ready too soon.")
    if top >= material:
        return (f"{head} The GPU finished half the gradients within {med:.2f} ms of the time {when}, and the "
                f"rest up to {top:.2f} ms after it: CPU clocks alone would show those late ones too soon.")
    return (f"{head} The CPU's times ({when}) are within {top:.2f} ms of them (median {med:.2f} ms), under "
            f"{MATERIAL:.0%} of the iteration: CPU clocks would show about the same.")


def torch_logger(trace: Trace, iteration: int) -> str | None:
    """torch's own DDP logger's timing of ``iteration`` beside the recording's (Note [Torch's logger as a
    second clock] in analysis/torch_logger.py); None unless the logger timed this iteration."""
    rows = [r for r in against_torch_logger(trace) if r["iteration"] == iteration]
    if not rows:
        return None
    row = rows[0]
    return (f"torch's own DDP logger (`_get_ddp_logging_data`) timed this iteration on rank {row['rank']}: "
            f"{_durations(row['torch'])}. This recording, measured as torch measures (its backward compute "
            f"ends after the last bucket's launch): {_durations(row['recorded'])}. {LOGGER_OVERLAP}")


LOGGER_OVERLAP = ("torch's \"overlap\" is a duration, from the first bucket's launch to the end of the backward "
                  "compute; \"Comm. overlapped with compute\" above is HTA's: the share of the communication's time "
                  "that ran under compute.")


def _durations(seconds: dict) -> str:
    return ", ".join(f"{KEYS[k]} {seconds[k] * 1e3:.1f} ms" for k in KEYS)
