"""The pages of a Join run whose rank 0 ran out of data: its cycles and layouts are those of the rank that
recorded the most (``Trace.longest_rank``), and rank 0 did not record the steady iterations there. The
Compare page stopped with StopIteration on the run (``_pick`` looked for the typical iteration on rank 0),
its table gave the run 1 bucket and 0 bytes sent per step (rank 0's construction layout, rank 0's
iterations), and the Timeline's title called iteration 3 a 'single bucket (construction layout)'."""
from apputil import compare_page
from test_join_steady import ALL_SHADOWED, _rank_0_out_of_data
from ddpsim.trace import load_trace


def _both():
    return load_trace(ALL_SHADOWED), _rank_0_out_of_data(load_trace(ALL_SHADOWED))


def test_compare_shows_a_run_whose_rank_0_ran_out_of_data_as_the_run_as_recorded():
    from ddpsim.viz import compare_rows, plot_compare, typical_iteration

    trace, swapped = _both()
    assert typical_iteration(swapped) == 3 and swapped.ranks[0].iteration(3) is None
    rows = compare_rows([("as recorded", trace), ("rank 0 out of data", swapped)])
    for key in ("buckets", "sent_bytes", "iteration_ms", "exposed_comm_ms", "n_iterations"):
        assert rows[0][key] == rows[1][key], key
    assert rows[1]["buckets"] == 2 and rows[1]["sent_bytes"] > 0
    fig = plot_compare([("as recorded", trace), ("rank 0 out of data", swapped)], iteration=3)
    heads = [t.get_text() for t in fig.axes[0].texts if "iteration 3" in t.get_text()]
    assert len(heads) == 2 and "rank 0, iteration 3" in heads[0] and "rank 1, iteration 3" in heads[1], heads
    at = compare_page({"as recorded": trace, "rank 0 out of data": swapped})
    assert not at.exception and not at.error
    assert at.dataframe[0].value["buckets"].tolist() == [2, 2]


def test_the_timeline_names_the_layout_of_the_rank_that_trained_the_iteration():
    from ddpsim.viz.describe import describe_iteration

    trace, swapped = _both()
    assert describe_iteration(swapped, 3) == describe_iteration(trace, 3) == "iteration 3: rebuilt layout, 2 buckets"


def test_the_validation_counts_the_recorded_buckets_of_the_rank_that_trained():
    from ddpsim.experiments.compare import predict_row
    from ddpsim.learn import learn

    trace, swapped = _both()
    w = learn(trace)
    assert predict_row(w, swapped, "torch", jitter="recorded")["n_buckets"].endswith("/2")


