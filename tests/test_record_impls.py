"""``record --impl torch|minddp|naive``: three implementations, one trace format."""
import pytest

from ddpsim.analysis import summarize


def layouts(trace):
    return [(l.from_iteration, l.kind, [(b.index, b.params, b.bytes, b.cap_bytes) for b in l.buckets])
            for l in trace.ranks[0].layouts]


@pytest.mark.slow
def test_minddp_trace_matches_torch_trace(record):
    torch_trace = record(name="torch", model="shuffled", iters=3, impl="torch")
    mini = record(name="minddp", model="shuffled", iters=3, impl="minddp")
    assert mini.meta["impl"] == "minddp" and torch_trace.meta["impl"] == "torch"
    assert layouts(mini) == layouts(torch_trace)
    for trace in (torch_trace, mini):
        for rank in trace.ranks:
            for it in rank.iterations:
                assert sorted(g.param for g in it.grad_ready) == list(range(len(trace.params)))
                assert [b.bucket for b in sorted(it.buckets, key=lambda b: b.launch_ns)] == \
                    list(range(len(rank.layout_at(it.iteration).buckets)))
                # what each launch cost the autograd thread (Note [Launching costs the autograd thread])
                assert all(b.launch_end_ns is not None and b.launch_end_ns >= b.launch_ns for b in it.buckets)
        # which ranks shared a core (Note [Ranks that share a CPU])
        assert trace.meta["pinning"]["cpus"] >= 1
    assert summarize(mini).keys() == summarize(torch_trace).keys()


@pytest.mark.slow
def test_naive_trace_has_no_overlap(record):
    trace = record(model="mlp", iters=3, impl="naive")
    for rank in trace.ranks:
        for it in rank.iterations:
            last_grad = max(g.t_ns for g in it.grad_ready)
            assert len(it.buckets) == sum(p.index is not None for p in trace.params)
            assert all(b.launch_ns >= last_grad for b in it.buckets), "naive launches after backward"
    assert summarize(trace)["overlap_fraction"] == 0.0
