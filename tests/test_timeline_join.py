"""Uneven inputs under Join on the Timeline page. A recording with --uneven 1 --join opened at its last
iteration read "Iteration time, iteration 5 = 40.9 ms, -15.7 ms vs the steady state" with not a word
that ranks 1 and 2 had run out of data there (the figures were rank 0's alone), while ``record`` and
``simulate`` print the run's Join line."""
from apputil import with_uploads
from ddpsim.analysis.join import join_line
from ddpsim.learn import learn, replay_config, simulate
from ddpsim.samples import sample_path
from ddpsim.trace import load_trace


def joined_run():
    """01's MLP on 2 ranks, rank 1 with one batch fewer, under Join (SIMULATED: real Join runs are recorded
    in tests/test_join.py)."""
    recorded = load_trace(sample_path("01_mlp_torch_default"))
    w = learn(recorded)
    trace, _ = simulate(w, replay_config(w, recorded, uneven=1, join=True, iters=4))
    return trace


def test_the_timeline_says_which_ranks_ran_out_of_data():
    trace = joined_run()
    last = max(it.iteration for it in trace.ranks[0].iterations)
    assert [s.iteration for s in trace.ranks[1].join.shadows] == [last]
    at = with_uploads({"joined": trace}, "timeline.py", "joined")
    at.select_slider[0].set_value(last).run()
    assert not at.exception
    said = [x.value for x in at.info if x.value.startswith("Join")]  # the first is "SIMULATED run..."
    assert said and said[0].startswith(join_line(trace) + "."), said
    assert f"In iteration {last} rank 1 has run out of data" in said[0]
    assert "the figures above are of the ranks still training" in said[0]
    at.select_slider[0].set_value(last - 1).run()  # every rank trains: the run's line alone
    assert [x.value for x in at.info if x.value.startswith("Join")] == [join_line(trace) + "."]
