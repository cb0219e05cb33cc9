"""The steady state of a Join run is the iterations every rank trained (Note [The steady state of a Join
run is every rank training] in ddpsim/analysis/join.py). The steady state took its median over the
iterations where a rank had run out of data and only shadowed too: on the fixture below 31.0 ms, where
the iterations every rank trained took 25.3 ms and the two shadowed ones 35.3 and 31.0 ms.

``tests/fixtures/join/join_uneven2_mlp_torch.json`` is a real recording: ``python -m ddpsim record --model mlp
--world-size 2 --iters 8 --uneven 2 --join --impl torch`` (2 gloo ranks; rank 1 trains iterations 0..5 and
shadows 6 and 7).
"""
import statistics

import pytest

from conftest import ROOT
from ddpsim.analysis import cycle_metrics, spread, steady_cycles, summarize
from ddpsim.analysis.join import join_line
from ddpsim.trace import load_trace

FIXTURE = ROOT / "tests/fixtures/join/join_uneven2_mlp_torch.json"


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


ALL_SHADOWED = ROOT / "tests/fixtures/join/join_uneven3_iters4_mlp_torch.json"  # record --model mlp --world-size 2
# --iters 4 --uneven 3 --join: rank 1 trains iteration 0 and shadows 1..3 (it never records the rebuilt layout)


def _rank_0_out_of_data(trace):
    """The same run with ranks 0 and 1 relabelled, so that rank 0 is the one that ran out of data (ranks in
    rank order, each keeping its own iterations, layouts and shadow steps)."""
    a, b = trace.ranks
    a.rank, b.rank = 1, 0
    trace.ranks = [b, a]
    return trace


def test_a_steady_state_made_only_of_shadowed_iterations_is_said_in_the_join_line():
    """Also where rank 0 ran out of data: its layouts end before the rebuild, and the replay buckets as the
    rank that trained did (rank 0's one bucket shadowed 3 allreduces where 6 were recorded)."""
    from ddpsim.learn import learn, replay_config
    from ddpsim.sim import simulate

    for trace in (load_trace(ALL_SHADOWED), _rank_0_out_of_data(load_trace(ALL_SHADOWED))):
        assert trace.shadowed_iterations == {1, 2, 3}
        assert summarize(trace)["steady_iterations"] == [1, 2, 3]
        line = join_line(trace)
        assert line.endswith("; iterations 1..3, with ranks shadowing, are the whole steady state"), line
        w = learn(trace)
        replay = join_line(simulate(w, replay_config(w, trace))[0])
        assert "; 6 zero-filled allreduces" in line and "; 6 zero-filled allreduces" in replay, replay


def test_rank_0_out_of_data_loses_no_shadowed_iteration():
    """The cycles are the micro-steps of the rank that recorded the most, whichever rank ran out of data:
    the Join line, the replay's learning and its ranks are those of the run as recorded."""
    from ddpsim.learn import learn, replay_config
    from ddpsim.sim import simulate

    trace, swapped = load_trace(FIXTURE), _rank_0_out_of_data(load_trace(FIXTURE))
    assert swapped.ranks[0].join.shadows and len(swapped.ranks[0].iterations) == 6
    assert summarize(swapped)["steady_iterations"] == [1, 2, 3, 4, 5]
    assert steady_cycles(swapped, shadowed=True) == [[i] for i in range(1, 8)]
    assert join_line(swapped).startswith("Join: rank 0 after micro-step 5 ran out of data")
    assert join_line(swapped).split("first forward")[1] == join_line(trace).split("first forward")[1]
    w, w_swapped = learn(trace), learn(swapped)
    assert w_swapped.meta["steady_iterations"] == list(range(1, 8))
    replays = [join_line(simulate(x, replay_config(x, t))[0]) for x, t in ((w, trace), (w_swapped, swapped))]
    assert replays[0] == replays[1] and "iterations 6..7, with ranks shadowing, took a median" in replays[0]


def test_with_powersgd_the_steady_state_is_compressing_steps_with_ranks_shadowing_and_says_so():
    """Every rank trained only PowerSGD's plain-allreduce warm-up (steps 1..3); the compressing steps 4..5 had
    rank 1 shadowing. At 1 Gb/s without rank noise a warm-up step took 833.2 ms, a shadowed compressing one
    44.2 ms, and one of the same run with even inputs 44.2 ms: the shadowed compressing steps are the run's
    steady state, less step 4, PowerSGD's set-up step (Note in analysis/metrics.py)."""
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic("resnet50")
    cfg = dict(world_size=2, iters=6, comm_hook="powersgd", powersgd_start_iter=4, bandwidth_gbps=1.0)
    trace, _ = simulate(w, SimConfig(**cfg, uneven=2, join=True))
    even, _ = simulate(w, SimConfig(**cfg))
    assert trace.shadowed_iterations == {4, 5}
    assert summarize(trace)["steady_iterations"] == summarize(even)["steady_iterations"] == [5]
    warm_up, shadowed = _median_ms(trace, [1, 2, 3]), _median_ms(trace, [4, 5])
    assert abs(shadowed / summarize(even)["iteration_time_s"] / 1e3 - 1) < 0.01 and warm_up > 10 * shadowed
    assert join_line(trace).endswith("; iteration 5, with ranks shadowing, is the whole steady state: every "
                                     "rank trained only iterations 1..3, PowerSGD's plain-allreduce warm-up before "
                                     "it compressed from step 4")


def test_the_join_line_names_no_sync_micro_steps_and_one_shadowed_iteration_as_they_are():
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic("resnet50")
    nosync, _ = simulate(w, SimConfig(world_size=2, iters=6, no_sync_every=2, uneven=3, join=True))
    assert nosync.shadowed_iterations == {9, 10, 11}  # rank 1 trained micro-step 8, the first of cycle [8, 9]
    per_step = statistics.median(cycle_metrics(nosync, c)["iteration_time_s"] for c in ([8, 9], [10, 11])) * 1e3
    assert (f"; micro-steps 8..11 (the cycles in which a rank shadowed) took a median {per_step:.1f} ms a "
            "micro-step, left out of the steady state") in join_line(nosync)
    one, _ = simulate(w, SimConfig(world_size=2, iters=6, uneven=1, join=True))
    assert one.shadowed_iterations == {5}
    assert join_line(one).endswith(f"; iteration 5, with ranks shadowing, took {_median_ms(one, [5]):.1f} ms, "
                                   "left out of the steady state")


def test_rank_0_out_of_data_learns_every_rank_figure_of_the_run_as_recorded():
    """Each recorded rank's speeds, its backward speed over the run and its backward alone are those of the
    simulated rank that plays it (``noise.simulated_rank``): the relabelled run's noop what-if read 19.390 ms
    against 18.752 ms, its alone factors {0: 1.010, 1: 1.208} against {0: 1.073, 1: 1.137}, where the
    alone-time of recorded rank r was fitted against simulated rank r, which played the other rank."""
    from ddpsim.learn import learn, replay_config
    from ddpsim.learn.noise import simulated_rank
    from ddpsim.sim import simulate

    trace, swapped = load_trace(FIXTURE), _rank_0_out_of_data(load_trace(FIXTURE))
    assert simulated_rank(trace) == {0: 0, 1: 1} and simulated_rank(swapped) == {0: 1, 1: 0}
    w, w_swapped = learn(trace), learn(swapped)
    for key in ("recorded_ranks", "rank_factors", "alone_backward_scale"):
        assert w.meta[key] and w_swapped.meta[key] == w.meta[key], key
    noop = [simulate(x, replay_config(x, t, comm_hook="noop"))[1]["iteration_time_s"]
            for x, t in ((w, trace), (w_swapped, swapped))]
    assert noop[0] == noop[1]


def test_under_no_sync_the_powersgd_warm_up_names_the_synced_step_it_compressed_from_by_its_micro_steps():
    """PowerSGD's start counts synced steps; the Join line counts micro-steps: it said 'every rank trained only
    micro-steps 2..3, ... before it compressed from step 3', where synced step 3 is micro-steps 6..7."""
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    cfg = SimConfig(world_size=2, iters=6, no_sync_every=2, uneven=8, join=True, comm_hook="powersgd",
                    powersgd_start_iter=3)
    trace, _ = simulate(synthetic("resnet50"), cfg)
    sent = {it.iteration: sum(sum(c.bytes for c in b.collectives) for b in it.buckets)
            for it in trace.ranks[0].iterations if it.sync}
    assert sent[7] < sent[5] / 10 and sent[5] == sent[3]  # the first compressed allreduce: micro-step 7
    assert join_line(trace).endswith("every rank trained only micro-steps 2..3, PowerSGD's plain-allreduce warm-up "
                                     "before it compressed from synced step 3 (micro-steps 6..7)"), join_line(trace)
