"""Uneven inputs under Join in words (``RankTrace.join``; Note [Join] in ddpsim/minddp/join.py)."""
from __future__ import annotations

from ddpsim.trace import Trace


def join_line(trace: Trace) -> str | None:
    """One line: which ranks ran out of data when, their shadow allreduces, when Join ended; None
    for a run not recorded or simulated under Join."""
    ranks = [r for r in trace.ranks if r.join is not None]
    if not ranks:
        return None
    joined = [f"rank {r.rank} after micro-step {r.join.shadows[0].iteration - 1}" for r in ranks if r.join.shadows]
    shadows = sum(len(s.allreduces) for r in ranks for s in r.join.shadows)
    end_ms = (max(r.join.end_ns for r in ranks) - min(r.iterations[0].forward.start_ns for r in ranks
                                                      if r.iterations)) / 1e6
    return (f"Join: {', '.join(joined) or 'no rank'} ran out of data; {shadows} zero-filled allreduces "
            f"shadowed the others'; every rank done {end_ms:.1f} ms after the first forward")
