"""What the Timeline page says beside its figure, without Streamlit: the import's own notes, whether an
iteration communicated at all, and what the GPU clock changed.
"""
from __future__ import annotations

from ddpsim.analysis import rank_overlaps
from ddpsim.trace import Trace

MATERIAL = 0.01  # a lag under this share of the iteration is a pixel or two on the Timeline: not worth a warning
NO_OVERLAP = "No collective took time in this iteration (the noop hook, or one rank): there is nothing to overlap."


def import_notes(trace: Trace) -> str | None:
    """The import's ``meta.import_notes`` as one markdown block, each note once; None for a recording."""
    notes = list(dict.fromkeys(str(n) for n in trace.meta.get("import_notes") or []))
    if not trace.imported or not notes:
        return None
    files = ", ".join(trace.meta.get("imported_from") or []) or "a PyTorch profile"
    return (f"**Imported** from {files} with `ddpsim import`. What the import says about it:\n\n"
            + "\n".join(f"- {n}" for n in notes))


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
