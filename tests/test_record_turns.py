"""Groups of different world sizes recorded at once take turns (Note [Take turns across world sizes])."""
import pytest

from ddpsim.experiments.recorder import record_in_turns
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import RecordError
from ddpsim.record.turns import Turns


def _group(tmp_path, ws, iters=5, **kw):
    cfgs = [RecordConfig(model="mlp", world_size=ws, iters=iters, **kw),
            RecordConfig(model="mlp", world_size=ws, iters=iters, bucket_cap_mb=0.25, **kw)]
    return cfgs, [tmp_path / f"ws{ws}_{i}.json" for i in range(len(cfgs))]


def test_two_world_sizes_take_turns_round_by_round(tmp_path):
    (a, b) = record_in_turns([_group(tmp_path, 2), _group(tmp_path, 1)])
    assert [len(t.ranks[0].iterations) for t in a + b] == [5, 5, 5, 5]
    spans = sorted((s, e, t.meta["turns"]["group"]) for t in (a[0], b[0]) for s, e in t.meta["turns"]["spans_ns"])
    assert [g for _, _, g in spans] == [0, 1] * 5  # group 0 first, then strictly alternating
    assert all(e1 <= s2 for (_, e1, _), (s2, _, _) in zip(spans, spans[1:]))  # no two turns overlap
    assert a[0].meta["turns"]["world_sizes"] == [2, 1]


def test_a_failing_group_lets_the_other_finish(tmp_path):
    """The group that fails is marked ended; the other records every iteration, then the failure is raised."""
    good = _group(tmp_path, 1, timeout_s=10.0)
    bad = ([RecordConfig(model="branchy", world_size=2, iters=5, timeout_s=10.0)],  # needs find_unused
           [tmp_path / "bad.json"])
    with pytest.raises(RecordError):
        record_in_turns([bad, good])
    from ddpsim.trace import load_trace
    assert len(load_trace(tmp_path / "ws1_0.json").ranks[0].iterations) == 5


def test_turn_numbers_stop_a_rank_from_running_a_turn_twice(tmp_path):
    g0, g1 = Turns.create(tmp_path, [2, 2])
    for g in (g0, g1):
        g.ready(rank=0)
        g.ready(rank=1)
    g0.take(1.0)
    g0.hand_on(rank=1)  # rank 1 is through its group's barrier before rank 0 hands the turn on
    with pytest.raises(Exception, match="waited more than 0 s"):
        g0.take(0.0)
    g0.hand_on(rank=0)
    g1.take(1.0)  # group 1's turn now
    g1.end()  # it ends in its turn: the turn comes back to group 0
    g0.take(1.0)
