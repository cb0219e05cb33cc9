"""``record --comm-hook``: a user's comm hook recorded on real gloo ranks, its collectives included.

Note [Watching a hook's collectives] in ddpsim/record/hookwatch.py. Each test records torch's DDP
with one hook (mlp, 2 ranks) and checks what the trace says against what the hook must send.
"""
import json
from pathlib import Path

import pytest

from ddpsim.errors import CLIError
from ddpsim.trace import load_trace, save_trace

TESTS = Path(__file__).parent
USER_HOOK = str(TESTS / "comm_hook_user.py")


def _hooked(trace):
    """Every (rank, iteration, bucket event) of a synced iteration."""
    return [(r, it, b) for r in trace.ranks for it in r.iterations for b in it.buckets]


def _check_spans(trace):
    for _r, _it, b in _hooked(trace):
        assert b.collectives is not None and b.compress_ns is not None and b.decompress_ns is not None
        assert b.launch_ns <= b.launch_end_ns and b.launch_ns <= b.complete_ns
        assert b.compress_ns + b.decompress_ns <= b.complete_ns - b.launch_ns
        for c in b.collectives:
            assert b.launch_ns <= c.launch_ns <= c.complete_ns <= b.complete_ns


@pytest.mark.slow
@pytest.mark.parametrize("hook,dtype", [("allreduce", "float32"), ("fp16", "float16"), ("bf16", "bfloat16")])
def test_allreduce_and_compression_hooks_send_the_bucket_in_their_dtype(record, hook, dtype):
    trace = record(model="mlp", world_size=2, iters=3, bucket_cap_mb=0.25, comm_hook=hook)
    assert trace.complete and trace.meta["options"]["comm_hook"] == hook
    _check_spans(trace)
    share = 1 if dtype == "float32" else 2  # fp16 and bf16: half the bucket's fp32 bytes
    rows = _hooked(trace)
    assert len({b.bucket for _r, _it, b in rows}) > 1  # several buckets after the rebuild
    for _r, _it, b in rows:
        assert [(c.op, c.dtype, c.bytes, c.group_size) for c in b.collectives] == \
            [("all_reduce", dtype, b.bytes // share, 2)]


@pytest.mark.slow
def test_noop_hook_records_buckets_without_collectives(record):
    trace = record(model="mlp", world_size=2, iters=2, bucket_cap_mb=0.25, comm_hook="noop")
    _check_spans(trace)
    for _r, _it, b in _hooked(trace):
        assert b.collectives == [] and b.decompress_ns == 0 and b.compress_ns == b.complete_ns - b.launch_ns


@pytest.mark.slow
def test_round_robin_alternates_the_buckets_over_two_groups(record):
    trace = record(model="mlp", world_size=2, iters=3, bucket_cap_mb=0.25, comm_hook="round-robin:2")
    _check_spans(trace)
    for r in trace.ranks:
        it = r.iterations[-1]
        assert len(it.buckets) >= 3
        groups = {b.bucket: b.collectives[0].group for b in it.buckets}
        assert all(len(b.collectives) == 1 and b.collectives[0].bytes == b.bytes for b in it.buckets)
        assert len(set(groups.values())) == 2
        for i in groups:  # bucket i and i + 2 share a group, i and i + 1 do not
            if i + 1 in groups:
                assert groups[i] != groups[i + 1]
            if i + 2 in groups:
                assert groups[i] == groups[i + 2]
        assert "0" not in groups.values()  # not the default group


def _powersgd_sizes(shapes, rank):
    """(uncompressed, P, Q) bytes of one fp32 bucket, as torch's powerSGD_hook splits it."""
    plain = p = q = 0
    for shape in shapes:
        n = shape[0]
        m = 1
        for d in shape[1:]:
            m *= d
        r = min(n, m, rank)
        if n * m >= 2 * (n + m) * r:  # _should_compress with min_compression_rate 2
            p, q = p + n * r, q + m * r
        else:
            plain += n * m
    return 4 * plain, 4 * p, 4 * q


@pytest.mark.slow
@pytest.mark.parametrize("rank", [1, 4])
def test_powersgd_sends_plain_allreduce_then_uncompressed_p_and_q(record, rank, tmp_path):
    # one bucket (a cap above the model): torch 2.13's powerSGD_hook can abort gloo with several
    trace = record(model="mlp", world_size=2, iters=4, bucket_cap_mb=100, comm_hook="powersgd",
                   powersgd_rank=rank, powersgd_start_iter=2)
    opts = trace.meta["options"]
    assert (opts["comm_hook"], opts["powersgd_rank"], opts["powersgd_start_iter"]) == ("powersgd", rank, 2)
    _check_spans(trace)
    shapes = {p.index: p.shape for p in trace.params if p.index is not None}
    for r in trace.ranks:
        for it in r.iterations:
            (b,) = it.buckets
            sizes = [c.bytes for c in b.collectives]
            if it.iteration < 2:  # before start_powerSGD_iter: the bucket in one allreduce
                assert sizes == [b.bytes]
            else:
                layout = r.layout_at(it.iteration).buckets[0]
                assert sizes == list(_powersgd_sizes([shapes[i] for i in layout.params], rank))
    save_trace(trace, tmp_path / "again.json")
    assert load_trace(tmp_path / "again.json") == trace


@pytest.mark.slow
def test_a_hook_with_find_unused_parameters_keeps_the_bitmap_apart(record):
    # the profiler tells the bitmap allreduce from the hook's collectives (instrument.OUR_LAUNCH)
    trace = record(model="branchy", world_size=2, iters=2, comm_hook="fp16", find_unused_parameters=True)
    n_params = sum(p.index is not None for p in trace.params)
    _check_spans(trace)
    for r in trace.ranks:
        for it in r.iterations:
            assert it.bitmap_allreduce is not None and it.bitmap_allreduce.bytes == 4 * n_params
            assert all(c.dtype == "float16" for b in it.buckets for c in b.collectives)


@pytest.mark.slow
def test_a_users_hook_file_is_recorded_and_the_trace_round_trips(record, tmp_path):
    trace = record(model="mlp", world_size=2, iters=3, bucket_cap_mb=0.25, comm_hook=f"{USER_HOOK}:factory")
    _check_spans(trace)
    for _r, _it, b in _hooked(trace):
        assert len(b.collectives) == 2 and sum(c.bytes for c in b.collectives) == b.bytes
    save_trace(trace, tmp_path / "again.json")
    again = load_trace(tmp_path / "again.json")
    assert again == trace
    assert json.loads((tmp_path / "again.json").read_text()) == trace.to_dict()


@pytest.mark.slow
def test_without_a_hook_the_trace_has_no_hook_fields(record):
    trace = record(model="mlp", world_size=2, iters=2, bucket_cap_mb=0.25)
    assert "comm_hook" not in trace.meta["options"] and "comm_hook" not in trace.meta["config"]
    for rank in trace.to_dict()["ranks"]:
        for it in rank["iterations"]:
            for b in it["buckets"]:
                assert not {"collectives", "compress_ns", "decompress_ns"} & set(b)


@pytest.mark.parametrize("options,words", [
    (dict(comm_hook="fp32"), "--comm-hook must be one of allreduce, fp16"),
    (dict(comm_hook="round-robin:0"), "round-robin:N needs a number"),
    (dict(comm_hook="round-robin:x"), "round-robin:N needs a number"),
    (dict(comm_hook="nothere.py:factory"), "comm hook file nothere.py does not exist"),
    (dict(comm_hook=f"{USER_HOOK}:missing"), "has no function 'missing'"),
    (dict(comm_hook="fp16", impl="minddp"), "--comm-hook needs --impl torch"),
    (dict(powersgd_rank=2), "need --comm-hook powersgd"),
    (dict(comm_hook="powersgd", powersgd_start_iter=1), "--powersgd-start-iter must be between 2"),
    (dict(comm_hook="powersgd", powersgd_rank=0), "--powersgd-rank must be between 1"),
])
def test_bad_hook_options_are_refused_in_one_line(options, words):
    from ddpsim.record.config import RecordConfig
    with pytest.raises(CLIError) as e:
        RecordConfig(**options).validate()
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_factory_that_returns_no_pair_is_refused_in_one_line():
    from ddpsim.record.hooks import build_hook
    with pytest.raises(CLIError, match=r"must return \(state, hook\), not function"):
        build_hook(f"{USER_HOOK}:not_a_pair")


def test_the_watch_puts_torch_back_and_passes_through_outside_a_hook():
    import torch
    import torch.distributed as dist
    from ddpsim import torchcompat
    from ddpsim.record.hookwatch import WATCHED, CollectiveWatch
    from ddpsim.trace.types import HOOK_OPS

    assert set(WATCHED) == set(HOOK_OPS)  # every collective the recorder watches, the reader accepts
    before = {name: getattr(dist, name) for name in WATCHED}
    then = torchcompat.future_class().then
    watch = CollectiveWatch().install()
    try:
        assert all(getattr(dist, name) is not before[name] for name in WATCHED)
        fut = torch.futures.Future()
        fut.set_result(3)
        assert fut.then(lambda f: f.value() + 1).wait() == 4  # not in a hook: torch's own then
    finally:
        watch.remove()
    assert {name: getattr(dist, name) for name in WATCHED} == before and torchcompat.future_class().then is then


def test_a_bad_collective_in_a_trace_is_one_line():
    from ddpsim.trace import TraceFormatError, from_dict
    base = json.loads((TESTS / "fixtures" / "tiny_trace.json").read_text())
    b = base["ranks"][0]["iterations"][0]["buckets"][0]
    row = {"op": "all_reduce", "bytes": 8, "dtype": "float16", "group": "0", "group_size": 2,
           "launch_ns": b["launch_ns"], "complete_ns": b["complete_ns"]}
    b.update(collectives=[row], compress_ns=0, decompress_ns=0)
    assert from_dict(base).ranks[0].iterations[0].buckets[0].collectives[0].dtype == "float16"
    for bad, words in [({"op": "send"}, "should be one of all_reduce"), ({"dtype": "half"}, "torch dtype name"),
                       ({"complete_ns": b["complete_ns"] + 1}, "outside its hook's span"),
                       ({"group_size": 0}, "group_size should be >= 1")]:
        b["collectives"] = [{**row, **bad}]
        with pytest.raises(TraceFormatError, match=words) as e:
            from_dict(base)
        assert "\n" not in str(e.value)


def test_an_old_trace_loads_and_writes_back_without_hook_fields(tmp_path):
    trace = load_trace(Path(__file__).parent / "fixtures" / "before" / "mlp_2026-11-21.json")  # recorded before hooks
    assert all(b.collectives is None for _r, _it, b in _hooked(trace))
    written = trace.to_dict()
    keys = {k for r in written["ranks"] for it in r["iterations"] for b in it["buckets"] for k in b}
    # what it has: no hook fields, and no host times (null in this older recording: written only where they are)
    assert keys == {"bucket", "bytes", "ready_ns", "launch_ns", "complete_ns"}
    save_trace(trace, tmp_path / "copy.json")
    assert load_trace(tmp_path / "copy.json") == trace
