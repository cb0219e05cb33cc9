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
every steady cycle has a rank shadowing, they are all there is and are kept, and the Join line says
so ('iterations 1..3, with ranks shadowing, are the whole steady state'): a rank ran out of data
after iteration 0, or, with PowerSGD, every rank trained only its plain-allreduce warm-up. The
compressing steps come first, the Join filter second: with a rank shadowing they are nearer the
run's steady state than the warm-up every rank trained. Simulated resnet50 on 2 ranks at 1 Gb/s,
PowerSGD from step 4, rank 1 out of data after step 3, without rank noise (``SimConfig``'s default,
tests/test_join_steady.py): a warm-up step took 833.2 ms, a shadowed compressing one 44.2 ms, and
one of the same run with even inputs 44.2 ms (``simulate --arch resnet50 --world-size 2 --iters 6
--comm-hook powersgd --powersgd-start-iter 4 --bandwidth-gbps 1 --uneven 2 --join``, with the
arch's rank noise: 44.3 ms, 44.4 ms with even inputs). The cycles are the
micro-steps of the rank that recorded the most (``Trace.longest_rank``), so that a rank 0 out of
data loses none of them; a no_sync cycle with a rank shadowing is named by its micro-steps, some of
which that rank may have trained ('micro-steps 8..11 (the cycles in which a rank shadowed)'). The
replay (``ddpsim.learn``) learns from the shadowed iterations as well
(``steady_cycles(trace, shadowed=True)``): the ranks training there compute as in any other, each
collective is still the whole world's, and each recorded step is replayed at its own speed.
"""
from __future__ import annotations

import statistics

from ddpsim.analysis.metrics import cycle_metrics, cycles, powersgd_start, steady_cycles
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
    """'; iterations 6..7, ... took a median 33.2 ms, left out of the steady state', or where they are
    all the steady state has, '; iterations 1..3, with ranks shadowing, are the whole steady state';
    '' without a shadowed iteration there (Note [The steady state of a Join run is every rank training])."""
    steady = steady_cycles(trace)
    apart = [c for c in steady_cycles(trace, shadowed=True) if c not in steady]
    if apart:
        median = statistics.median(cycle_metrics(trace, c)["iteration_time_s"] for c in apart) * 1e3
        took = f"took {median:.1f} ms" if len(apart) == 1 else f"took a median {median:.1f} ms"
        per = " a micro-step" if len(apart[0]) > 1 else ""
        return f"; {_which(apart)} {took}{per}, left out of the steady state"
    if trace.shadowed_iterations.intersection(i for c in steady for i in c):
        verb = "is" if len(steady) == len(steady[0]) == 1 else "are"
        return f"; {_which(steady)} {verb} the whole steady state{_warm_up(trace)}"
    return ""


def _which(chosen: list[list[int]]) -> str:
    """'iterations 6..7, with ranks shadowing,' or, of no_sync cycles (where a rank may have trained a
    cycle's first micro-steps), 'micro-steps 8..11 (the cycles in which a rank shadowed)'."""
    if len(chosen[0]) > 1:
        return f"{_steps(chosen)} (the cycle{'s' * (len(chosen) > 1)} in which a rank shadowed)"
    return f"{_steps(chosen)}, with ranks shadowing,"


def _steps(chosen: list[list[int]]) -> str:
    """'iteration 5', 'iterations 6..7', or of no_sync cycles 'micro-steps 8..11'."""
    its = [i for c in chosen for i in c]
    if len(its) == 1:
        return f"iteration {its[0]}"
    return f"{'micro-steps' if len(chosen[0]) > 1 else 'iterations'} {its[0]}..{its[-1]}"


def _warm_up(trace: Trace) -> str:
    """With PowerSGD, where every rank trained only in its plain-allreduce warm-up: ': every rank trained
    only iterations 1..3, PowerSGD's plain-allreduce warm-up before it compressed from step 4', under
    no_sync '... micro-steps 2..3, ... compressed from synced step 3 (micro-steps 6..7)'; else ''."""
    start, shadowed, all_cycles = powersgd_start(trace), trace.shadowed_iterations, cycles(trace)
    if start is None:
        return ""
    trained = [c for k, c in enumerate(all_cycles) if k < start and 0 not in c and not shadowed.intersection(c)]
    if not trained:
        return ""
    many = len(trained[0]) > 1 and start < len(all_cycles)  # no_sync: synced step k is cycle k, not micro-step k
    step = f"synced step {start} ({_steps([all_cycles[start]])})" if many else f"step {start}"
    return (f": every rank trained only {_steps(trained)}, PowerSGD's plain-allreduce warm-up before it "
            f"compressed from {step}")
