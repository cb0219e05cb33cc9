"""Whatever the recorder writes and ``merge`` joins, ddpsim reads back (a property test).

Hypothesis draws ranks that recorded with the real shard writer (``RankRecorder``): clock offsets,
times anywhere in the recorder's range, iterations with their forward, backward and optimizer in
order, gradients inside the backward and buckets after their gradients, sizes up to the reader's
bound. ``merge_files`` must write a trace that ``load_trace`` reads, with every time moved by the
same amount on a rank. (Simulate and export outputs are checked on every fuzzed trace in
``tests/test_trace_fuzz.py``.)
"""
from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpsim.events import RankRecorder
from ddpsim.record.merge import merge_files
from ddpsim.trace import load_trace
from ddpsim.trace.reader import MAX_BYTES

PARAMS = 4
SPAN = st.integers(0, 10**9)  # ns between two recorded instants


@st.composite
def rank_runs(draw):
    """One rank: (clock offset, first time, per iteration the gaps between its instants, bucket bytes)."""
    offset = draw(st.integers(-10**9, 10**9))
    start = draw(st.integers(10**9, 2**62))
    iters = draw(st.lists(st.lists(SPAN, min_size=6 + PARAMS, max_size=6 + PARAMS), min_size=1, max_size=3))
    nbytes = draw(st.integers(0, MAX_BYTES // 2))
    return offset, start, iters, nbytes


def _write(path, rank, world, run, **header) -> None:
    offset, t, iters, nbytes = run
    rec = RankRecorder(path, rank, {"world_size": world, "backend": "gloo", "impl": "torch",
                                    "clock": {"method": "drawn", "offset_ns": offset}, **header})
    rec.header_update({"params": [{"index": i, "name": f"p{i}", "shape": [1], "dtype": "float32",
                                   "bytes": nbytes // PARAMS, "requires_grad": True} for i in range(PARAMS)]})
    for n, gaps in enumerate(iters):
        times = []
        for g in gaps:
            t += g
            times.append(t)
        f0, f1, ready = times[0], times[1], times[2:2 + PARAMS]
        launch, done, b1, o1 = times[2 + PARAMS:]
        rec.begin_iteration(n, True)
        rec.span("forward", f0, f1)
        for p, r in zip(reversed(range(PARAMS)), ready):
            rec.grad_ready(p, r)
        ev = rec.bucket_launch(0, list(reversed(range(PARAMS))), nbytes, launch)
        rec.bucket_complete(ev, done)
        rec.span("backward", f1, b1)
        rec.span("optimizer", b1, o1)
        rec.end_iteration()
    rec.finish(None)


@settings(max_examples=60, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(rank_runs(), min_size=1, max_size=3))
def test_merged_shards_load_back(tmp_path_factory, runs):
    folder = tmp_path_factory.mktemp("shards")
    shards = [folder / f"run.json.rank{r}.jsonl" for r in range(len(runs))]
    for r, (path, run) in enumerate(zip(shards, runs)):
        _write(path, r, len(runs), run)
    merged = merge_files(shards, folder / "run.json")
    loaded = load_trace(folder / "run.json")
    assert loaded.to_dict() == json.loads(json.dumps(merged.to_dict()))  # (JSON keys are strings)
    for rank, (offset, start, _, _) in zip(loaded.ranks, runs):
        it = rank.iterations[0]
        shift = it.forward.start_ns - (start + runs[rank.rank][2][0][0])  # every time moved alike
        assert it.backward.end_ns - it.forward.start_ns == sum(runs[rank.rank][2][0][1:PARAMS + 5])
        assert shift == -offset - min(s + r[0][0] - o for o, s, r, _ in runs)
        assert min(it.forward.start_ns for r in loaded.ranks for it in r.iterations[:1]) == 0


def test_a_rank_that_wrote_nothing_merges_beside_one_that_did(tmp_path):
    """A rank killed before its header line is an empty shard (the launcher's stub): the merge keeps it,
    incomplete, beside the ranks that recorded (it once failed on the Join fields the stub lacked)."""
    from ddpsim.record.failure import read_or_stub
    from ddpsim.record.merge import merge, read_shard

    _write(tmp_path / "r0.jsonl", 0, 2, (0, 10**9, [[1000] * (6 + PARAMS)], 64))
    stub = read_or_stub(tmp_path / "r1.jsonl", 1)  # no file: the rank wrote nothing
    out = merge([read_shard(tmp_path / "r0.jsonl"), stub], notes={1: "died from signal SIGKILL"})
    assert [r["complete"] for r in out["ranks"]] == [True, False]
    assert out["ranks"][1]["error"] == "died from signal SIGKILL" and "join" not in out["ranks"][1]
