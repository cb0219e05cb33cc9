"""Rank noise at scale (ddpsim/sim/stragglers.py): every rank waits for the expected slowest of N, which
grows with N, carried from one spread to any world size."""
import math

import pytest

from ddpsim.sim import SimConfig, simulate, synthetic
from ddpsim.sim.stragglers import expected_max, slowest_factor


def test_expected_max_of_normals():
    assert expected_max(1) == 0.0
    assert expected_max(2) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-4)  # closed form
    assert expected_max(3) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-4)
    assert expected_max(1000) == pytest.approx(3.2414, abs=1e-3)  # tables of normal order statistics
    values = [expected_max(n) for n in (2, 8, 64, 1024, 100_000)]
    assert values == sorted(values) and values[-1] < math.sqrt(2 * math.log(100_000))


def test_no_sync_windows_average_the_noise():
    assert slowest_factor(0.04, 256, 4) - 1 == pytest.approx((slowest_factor(0.04, 256, 1) - 1) / 2)
    assert slowest_factor(0.04, 1) == 1.0


def _time(world, jitter, **kw):
    w = synthetic("resnet50", "a100-ib200")
    return simulate(w, SimConfig(world_size=world, iters=3, jitter=jitter, jitter_mode="expected", **kw))


def test_waiting_for_stragglers_grows_with_the_world_and_is_deterministic():
    waits = []
    for world in (8, 64, 1024, 100_000):
        noisy = _time(world, 0.02)[1]["iteration_time_s"]
        quiet = _time(world, 0.0)[1]["iteration_time_s"]
        waits.append(noisy - quiet)
    assert all(b > a > 0 for a, b in zip(waits, waits[1:]))
    assert _time(64, 0.02)[1]["iteration_time_s"] == _time(64, 0.02)[1]["iteration_time_s"]
    assert _time(1, 0.02)[1]["iteration_time_s"] == _time(1, 0.0)[1]["iteration_time_s"]


def test_the_ranks_are_one_actor_at_the_expected_slowest_speed():
    trace, summary = _time(100_000, 0.02, stragglers={3: 1.5})
    assert summary["actors"] == 2  # the straggler and everyone else
    group = next(g for g in trace.meta["rank_groups"] if g["kind"] == "expected-slowest")
    assert group["count"] == 99_999 and group["factor"] == pytest.approx(1 + 0.02 * expected_max(99_999))
    with pytest.raises(ValueError, match="jitter_mode must be one of sampled, expected"):
        SimConfig(jitter_mode="mean").validate()


def _step(world, k, jitter=0.0, mode="sampled", seed=0):
    """Seconds per step of ResNet-50 at ``world`` ranks, ``k`` micro-steps a sync, ``jitter`` rank noise."""
    w = synthetic("resnet50", "a100-ib200")
    return simulate(w, SimConfig(world_size=world, iters=40, jitter=jitter, jitter_mode=mode, no_sync_every=k,
                                 seed=seed))[1]["iteration_time_s"]


@pytest.mark.parametrize("world, k", [(64, 1), (64, 4), (4096, 1), (4096, 4)])
def test_drawn_ranks_wait_as_long_as_the_expected_slowest(world, k):
    """Drawn speeds (a sample of ranks one by one and the slowest of the rest as one actor, sim/plan.py)
    wait what the expectation says, across no_sync windows too: the group's slowest is drawn once per
    window (drawn per micro-step, the sum of maxima waited twice as long at 4,096 ranks and k = 4).
    The wait: the step with 2% jitter less the step without (one simulation, no noise to draw)."""
    quiet = _step(world, k)
    drawn = sum(_step(world, k, 0.02, "sampled", seed) - quiet for seed in range(3)) / 3
    assert drawn == pytest.approx(_step(world, k, 0.02, "expected") - quiet, rel=0.1)


def test_sixty_four_drawn_ranks_are_nine_actors():
    w = synthetic("resnet50", "a100-ib200")
    trace, s = simulate(w, SimConfig(world_size=64, iters=2, jitter=0.02))
    assert s["actors"] == 9 and len(trace.ranks) == 8  # the first, 7 drawn ranks (trace_ranks), the group
    assert trace.meta["rank_groups"] == [{"kind": "max-of-group", "count": 56,
                                          "note": "jitter multiplier = max of the group's draws; not in ranks"}]
    trace, s = simulate(w, SimConfig(world_size=64, iters=2, jitter=0.02, trace_ranks=2))
    assert s["actors"] == 6 and len(trace.ranks) == 2  # sample_ranks drawn, trace_ranks of them kept
    trace, s = simulate(w, SimConfig(world_size=8, iters=2, jitter=0.02))
    assert s["actors"] == 8 and not trace.meta.get("rank_groups")  # up to 8: every rank one by one


def test_uneven_inputs_keep_the_spread_in_expected_mode():
    """Uneven inputs play every rank alone: in "expected" mode no group was left to carry the spread, so it was
    dropped (+0.000 ms for a 10% spread); each rank now draws its own, as in "sampled"."""
    w = synthetic("resnet50", "a100-ib200")
    cost = {}
    for mode in ("expected", "sampled"):
        t = [simulate(w, SimConfig(world_size=8, iters=12, join=True, uneven=1, jitter=j, jitter_mode=mode))[1]
             ["iteration_time_s"] for j in (0.0, 0.1)]
        cost[mode] = t[1] - t[0]
    assert cost["expected"] > 0.05 * t[0] and cost["expected"] == pytest.approx(cost["sampled"])


def test_a_named_straggler_is_waiting_not_exposed_communication(capsys):
    """--straggler RANK:F: the other ranks wait for it as for a drawn slow rank; the wait was counted as exposed
    communication (60 ms of "exposed comm" over NVLink, 0 ms waiting)."""
    import json

    from ddpsim.cli import main as cli
    from ddpsim.learn.scaling import split
    w = synthetic("resnet50", "v100-ib100")
    row = split(2, simulate, w, SimConfig(world_size=2, iters=3, jitter=0.0, stragglers={0: 1.5}))
    assert row["waiting_s"] > 0.3 * row["iteration_time_s"] and row["exposed_comm_s"] < 0.01 * row["iteration_time_s"]
    assert cli(["simulate", "--arch", "resnet50", "--hardware", "v100-ib100", "--world-size", "64",
                "--straggler", "5:1.5"]) == 0
    out = capsys.readouterr().out.splitlines()
    summary = json.loads(out[-1])
    said = next(line for line in out if line.startswith("waiting for stragglers: "))
    waited_ms = float(said.split()[3])
    assert waited_ms > 0.3 * summary["iteration_time_s"] * 1e3  # a third of the step: the 1.5x rank
