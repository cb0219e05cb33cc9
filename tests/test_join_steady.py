"""The steady state of a Join run is the iterations every rank trained (Note [The steady state of a Join
run is every rank training] in ddpsim/analysis/join.py). The steady state took its median over the
iterations where a rank had run out of data and only shadowed too: on the fixture below 31.0 ms, where
the iterations every rank trained took 25.3 ms and the two shadowed ones 35.3 and 31.0 ms.

``tests/fixtures/join_uneven2_mlp_torch.json`` is a real recording: ``python -m ddpsim record --model mlp
--world-size 2 --iters 8 --uneven 2 --join --impl torch`` (2 gloo ranks; rank 1 trains iterations 0..5 and
shadows 6 and 7).
"""
import statistics

import pytest

from conftest import ROOT
from ddpsim.analysis import cycle_metrics, spread, steady_cycles, summarize
from ddpsim.analysis.join import join_line
from ddpsim.trace import load_trace

FIXTURE = ROOT / "tests/fixtures/join_uneven2_mlp_torch.json"


def _shadowed(trace):
    """The iterations a joined rank shadowed, read from the join records."""
    return {s.iteration for r in trace.ranks if r.join for s in r.join.shadows}


def _median_ms(trace, iterations):
    return statistics.median(cycle_metrics(trace, [i])["iteration_time_s"] for i in iterations) * 1e3


def test_the_steady_state_of_a_recorded_join_run_is_the_iterations_every_rank_trained():
    from ddpsim.viz import typical_iteration

    trace = load_trace(FIXTURE)
    assert _shadowed(trace) == {6, 7}
    s = summarize(trace)
    assert s["steady_iterations"] == [1, 2, 3, 4, 5]
    assert s["iteration_time_s"] * 1e3 == pytest.approx(_median_ms(trace, range(1, 6)))
    assert abs(_median_ms(trace, range(1, 8)) - _median_ms(trace, range(1, 6))) > 1  # the shadowed ones move it
    assert spread(trace)["iteration_time_s"]["n"] == 5
    assert typical_iteration(trace) in range(1, 6)  # the Timeline opens on an iteration every rank trained
    assert trace.shadowed_iterations == {6, 7}
    assert steady_cycles(trace, shadowed=True) == [[i] for i in range(1, 8)]


def test_the_join_line_gives_the_shadowed_iterations_apart():
    trace = load_trace(FIXTURE)
    line = join_line(trace)
    said = f"; iterations 6..7, with ranks shadowing, took a median {_median_ms(trace, [6, 7]):.1f} ms, left out"
    assert said in line and "\n" not in line, line


def test_a_simulated_join_run_keeps_shadowed_iterations_only_where_they_are_all_there_is():
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic("resnet50")
    trace, _ = simulate(w, SimConfig(world_size=3, iters=6, uneven=2, join=True))  # rank 2 trains 0 and 1
    assert _shadowed(trace) == {2, 3, 4, 5}
    assert steady_cycles(trace) == [[1]] and summarize(trace)["steady_iterations"] == [1]
    assert "iterations 2..5, with ranks shadowing" in join_line(trace)
    early, _ = simulate(w, SimConfig(world_size=2, iters=3, uneven=2, join=True))  # rank 1 trains iteration 0
    assert _shadowed(early) == {1, 2} and steady_cycles(early) == [[1], [2]]  # nothing else to take
    assert "left out of the steady state" not in join_line(early)


def test_the_replay_learns_from_the_shadowed_iterations_and_summarises_as_the_recording():
    """The replay (``simulate --trace``, the What-if's unchanged run) learns compute and collectives from the
    shadowed iterations too, and replays each recorded step at its speed; its steady state, like the
    recording's, is the iterations every rank trained."""
    from ddpsim.learn import learn, replay_config
    from ddpsim.sim import simulate

    trace = load_trace(FIXTURE)
    w = learn(trace)
    assert w.meta["steady_iterations"] == list(range(1, 8))
    replay, _ = simulate(w, replay_config(w, trace))
    assert _shadowed(replay) == {6, 7}
    assert summarize(replay)["steady_iterations"] == summarize(trace)["steady_iterations"] == [1, 2, 3, 4, 5]
