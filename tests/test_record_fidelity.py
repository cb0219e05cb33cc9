"""The recorder tells the truth about torch's DDP: torch's own logging data is the oracle.

Every zoo model at world sizes 2 and 4, with the default bucket cap (1 MiB first
bucket, rebuilt after iteration 0) and an explicit --bucket-cap-mb 25 (25 MiB first
bucket too). branchy needs find_unused_parameters (its branch is unused on some
ranks), which keeps the construction layout and never rebuilds.
"""
import pytest

ZOO = ["mlp", "convnet", "transformer", "branchy", "shuffled"]


def sizes(text):
    return [int(x) for x in str(text).split(",") if x.strip()]


def per_bucket_indices(text):
    return [[int(i) for i in part.split()] for part in str(text).split(",") if part.strip()]


def check_against_torch(trace):
    for rank in trace.ranks:
        log = rank.ddp_logging_data
        construction = rank.layouts[0]
        assert construction.kind == "construction" and construction.from_iteration == 0
        assert [b.bytes for b in construction.buckets] == sizes(log["bucket_sizes"])
        if trace.meta["options"]["find_unused_parameters"]:
            assert len(rank.layouts) == 1, "find_unused_parameters never rebuilds"
            assert not log.get("rebuilt_bucket_sizes")
        else:
            assert len(construction.buckets) == 1, "torch 2.13 starts with one bucket"
            rebuilt = rank.layouts[1]
            assert (rebuilt.kind, rebuilt.from_iteration) == ("rebuilt", 1)
            assert [b.bytes for b in rebuilt.buckets] == sizes(log["rebuilt_bucket_sizes"])
            assert [b.params for b in rebuilt.buckets] == per_bucket_indices(
                log["rebuilt_per_bucket_param_indices"])


def check_events(trace):
    n_params = sum(p.index is not None for p in trace.params)
    for rank in trace.ranks:
        for it in rank.iterations:
            got = sorted(g.param for g in it.grad_ready)
            if it.sync:
                assert got == list(range(n_params)), f"iteration {it.iteration}: one grad-ready per param"
                launched = [b.bucket for b in sorted(it.buckets, key=lambda b: b.launch_ns)]
                assert launched == sorted(launched) == list(range(len(rank.layout_at(it.iteration).buckets)))
                assert all(b.ready_ns <= b.launch_ns <= b.complete_ns for b in it.buckets)
            # Note [The backward's compute alone]: the autograd thread's CPU time, at most its wall time
            wall = it.backward.end_ns - it.backward.start_ns
            assert 0 < it.backward_cpu_ns <= wall, (it.iteration, it.backward_cpu_ns, wall)
            if not it.sync:
                assert it.buckets == [] and it.bitmap_allreduce is None


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("model", ZOO)
def test_layouts_equal_torchs_own(record, model, world_size):
    find_unused = model == "branchy"
    default = record(model=model, world_size=world_size, iters=3, find_unused_parameters=find_unused)
    explicit = record(name="cap25", model=model, world_size=world_size, iters=3, bucket_cap_mb=25,
                      find_unused_parameters=find_unused)
    for trace in (default, explicit):
        assert trace.complete
        check_against_torch(trace)
        check_events(trace)
    caps = lambda t: [b.cap_bytes for b in t.ranks[0].layouts[-1].buckets]  # noqa: E731
    assert caps(default)[0] == (1 << 20 if not find_unused else caps(default)[0])
    assert caps(explicit)[0] == 25 << 20
    if model == "mlp":
        assert [b.params for b in default.ranks[0].layouts[-1].buckets] != \
               [b.params for b in explicit.ranks[0].layouts[-1].buckets]


@pytest.mark.slow
def test_no_sync_steps_have_no_allreduce(record):
    trace = record(model="mlp", world_size=2, iters=6, no_sync_every=3)
    check_events(trace)
    syncs = [it.sync for it in trace.ranks[0].iterations]
    assert syncs == [False, False, True, False, False, True]
    assert all(it.optimizer is None for it in trace.ranks[0].iterations if not it.sync)


@pytest.mark.slow
def test_find_unused_records_graph_search_and_bitmap(record):
    trace = record(model="branchy", world_size=2, iters=4, find_unused_parameters=True)
    n_params = sum(p.index is not None for p in trace.params)
    for rank in trace.ranks:
        for it in rank.iterations:
            assert it.graph_search is not None and it.graph_search.duration_ns > 0
            bitmap = it.bitmap_allreduce
            assert bitmap is not None and bitmap.bytes == 4 * n_params
            last_launch = max(b.launch_ns for b in it.buckets)
            assert last_launch <= bitmap.launch_ns <= bitmap.complete_ns
    unused = {(r.rank, it.iteration) for r in trace.ranks for it in r.iterations
              if any(g.unused for g in it.grad_ready)}
    assert unused, "branchy leaves its branch unused somewhere"
