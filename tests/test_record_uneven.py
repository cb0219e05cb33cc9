"""Uneven inputs without Join: the rank that ran out of data is named with the fix, and every
process ends (Note [A rank out of data] in ddpsim/heartbeat.py)."""
import pytest

from conftest import live_pids
from faultinject import UNPINNED, FaultClock

TIMEOUT_S = 8.0


@pytest.mark.slow
def test_the_rank_that_ran_out_of_data_is_named_with_the_fix(tmp_path):
    from ddpsim import load_trace
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import RecordError, record

    cfg = RecordConfig(model="mlp", world_size=3, iters=5, uneven=1, timeout_s=TIMEOUT_S, pin_cpus=UNPINNED)
    assert [cfg.iters_for(r) for r in range(3)] == [5, 4, 3]
    with FaultClock(tmp_path / "run.json", rank=2, count=3) as clock, pytest.raises(RecordError) as err:
        record(cfg, tmp_path / "run.json")
    message = str(err.value)
    assert message.startswith("rank 2 ran out of data after iteration 2 while rank(s) 0, 1 went on to "
                              "iteration 3: they wait in allreduce of bucket"), message
    assert "with model.join():" in message and "\n" not in message
    after = clock.seconds_since_fault()  # rank 2's last iteration written -> every rank gone
    assert after is not None and after <= TIMEOUT_S + 5, after
    trace = load_trace(tmp_path / "run.json")
    ranks = {r.rank: r for r in trace.ranks}
    assert len(ranks[2].iterations) == 3 and ranks[2].error.startswith("hung: ran out of data")
    assert trace.meta["options"]["uneven"] == 1
    assert live_pids([r.pid for r in trace.ranks if r.pid]) == []


def test_uneven_that_leaves_a_rank_without_data_is_refused_in_one_line():
    from ddpsim.errors import CLIError
    from ddpsim.record.config import RecordConfig

    with pytest.raises(CLIError) as err:
        RecordConfig(model="mlp", world_size=4, iters=6, uneven=2).validate()
    assert "--uneven 2 leaves rank 3 without iterations" in str(err.value) and "\n" not in str(err.value)
