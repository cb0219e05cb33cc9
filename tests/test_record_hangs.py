"""A hung or killed rank is named, every process ends within timeout + 5 s, the partial trace is kept.

One trial per (signal, moment) here; benchmarks/bench_faults.py runs 20 for the report.
"""
import re

import pytest

from faultinject import UNPINNED, FaultClock, trial

TIMEOUT_S = 8.0


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL"])
@pytest.mark.parametrize("when", ["start-up", "training"])
def test_signalled_rank_is_named_and_everything_ends(tmp_path, sig, when):
    r = trial(tmp_path, sig, when, seed=7, timeout_s=TIMEOUT_S)
    assert r.named == r.victim, r.message
    kept = "partial trace kept" if r.iterations_kept else "each rank's fate kept"  # no iteration before the fault
    assert "\n" not in r.message and kept in r.message, r.message
    assert r.seconds_to_gone <= TIMEOUT_S + 5, f"all processes gone {r.seconds_to_gone:.1f} s after the fault"
    assert r.leftover == []
    assert r.trace_kept, "the trace is kept and marked incomplete"
    expected = "hung: stopped" if sig == "SIGSTOP" else "died from signal SIGKILL"
    assert r.victim_marked and expected in r.victim_marked, r.victim_marked
    if sig == "SIGSTOP":
        assert "its process is stopped" in r.message
        if r.when == "training":
            # it is behind the others, or (signalled after launching) inside the allreduce they wait in, or
            # (signalled after its backward) the others went on to a forward's collective, or (signalled in a
            # forward) the others wait in that forward's collective (heartbeat.blame's branches)
            assert re.search(r"(did not join|: inside) allreduce of bucket \d+|(waits in forward of iteration \d+|"
                             r"wait in the same step), in a collective it did not join", r.message), r.message


@pytest.mark.slow
def test_a_model_that_blocks_in_forward_is_named(tmp_path):
    """No signal: rank 1's forward sleeps forever (a user model that blocks)."""
    from ddpsim import load_trace
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import RecordError, record
    from test_record_faults import FAULTS

    cfg = RecordConfig(model=f"{FAULTS}:blocking_factory", world_size=2, iters=6, timeout_s=TIMEOUT_S,
                       pin_cpus=UNPINNED)
    with FaultClock(tmp_path / "run.json", rank=1, count=2) as clock, pytest.raises(RecordError) as err:
        record(cfg, tmp_path / "run.json")
    message = str(err.value)
    assert message.startswith("rank 1 stopped in forward of iteration 2"), message
    assert "did not join allreduce of bucket" in message and "rank 0 is waiting in" in message
    after = clock.seconds_since_fault()  # rank 1's second iteration written -> every rank gone
    assert after is not None and after <= TIMEOUT_S + 5, after
    trace = load_trace(tmp_path / "run.json")
    ranks = {r.rank: r for r in trace.ranks}
    assert ranks[1].error.startswith("hung:") and not trace.complete
