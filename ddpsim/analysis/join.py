"""Uneven inputs under Join in words (``RankTrace.join``; Note [Join] in ddpsim/minddp/join.py).

Note [The steady state of a Join run is every rank training]: under torch's ``Join`` a rank whose
data ran out matches the others' collectives with zero-filled ones (``_DDPJoinHook.main_hook``)
until the last rank is done. The others then train on fewer ranks' batches, and nobody waits for
the joined rank's compute: those iterations are not the run's steady state, and the steady state
(``metrics.steady_cycles``) leaves them out, taking the iterations every rank trained. Their time
is said apart, in the Join line (``join_line``). Measured on mlp, 2 gloo ranks, ``--uneven`` 2 of 8
iterations and 4 of 12, torch's DDP and minddp: the median iteration every rank trained against
the shadowed ones' was 25.3 against 33.2 ms, 30.2 against 28.0 ms (torch), 30.7 against 29.7 ms
and 30.7 against 28.9 ms (minddp); with both in, the median moved by -4.7% to +22.5%. Where
every steady cycle has a rank shadowing (one ran out of data after iteration 0), they are all there is
and are kept. The replay (``ddpsim.learn``) learns from the shadowed iterations as well
(``steady_cycles(trace, shadowed=True)``): the ranks training there compute as in any other, each
collective is still the whole world's, and each recorded step is replayed at its own speed.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import cycle_metrics, steady_cycles
from ddpsim.trace import Trace


def join_line(trace: Trace) -> str | None:
    """One line: which ranks ran out of data when, their shadow allreduces, when Join ended, and the
    shadowed iterations' time apart from the steady state; None for a run not recorded or simulated
    under Join."""
    ranks = [r for r in trace.ranks if r.join is not None]
    if not ranks:
        return None
    joined = [f"rank {r.rank} after micro-step {r.join.shadows[0].iteration - 1}" for r in ranks if r.join.shadows]
    shadows = sum(len(s.allreduces) for r in ranks for s in r.join.shadows)
    end_ms = (max(r.join.end_ns for r in ranks) - min(r.iterations[0].forward.start_ns for r in ranks
                                                      if r.iterations)) / 1e6
    return (f"Join: {', '.join(joined) or 'no rank'} ran out of data; {shadows} zero-filled allreduces "
            f"shadowed the others'; every rank done {end_ms:.1f} ms after the first forward{shadowed_text(trace)}")


def shadowed_text(trace: Trace) -> str:
    """'; iterations 6..7, ... took a median 33.2 ms, left out of the steady state', or '' where the
    steady state has no shadowed iteration to leave out (Note [The steady state of a Join run is every
    rank training])."""
    steady = steady_cycles(trace)
    apart = [c for c in steady_cycles(trace, shadowed=True) if c not in steady]
    if not apart:
        return ""
    its = [i for c in apart for i in c]
    which = f"iteration {its[0]}" if len(its) == 1 else f"iterations {its[0]}..{its[-1]}"
    median = statistics.median(cycle_metrics(trace, c)["iteration_time_s"] for c in apart) * 1e3
    return f"; {which}, with ranks shadowing, took a median {median:.1f} ms, left out of the steady state"
