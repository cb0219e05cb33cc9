"""Mixed precision and rebuilds: torch's DDP and minddp record the same layouts.

Real processes, real gloo (it reduces float16 on CPU), torch's DDP and minddp recorded
side by side in the same ranks (``record_many``).
"""
from pathlib import Path

import pytest

from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record_many

MODELS = Path(__file__).with_name("mixed_models.py")


def layouts(trace):
    return [(lay.from_iteration, lay.kind, [(b.index, b.params, b.bytes, b.cap_bytes) for b in lay.buckets])
            for lay in trace.ranks[0].layouts]


def record_both(tmp_path, factory, **options):
    cfgs = [RecordConfig(model=f"{MODELS}:{factory}", iters=3, impl=impl, **options)
            for impl in ("torch", "minddp")]
    return record_many(cfgs, [tmp_path / f"{factory}_{c.impl}.json" for c in cfgs])


@pytest.mark.slow
def test_mixed_fp16_fp32_rebuilt_layouts_are_identical(tmp_path):
    torch_trace, mini = record_both(tmp_path, "mixed_mlp")
    assert {p.dtype for p in torch_trace.params} == {"float16", "float32"}
    assert layouts(mini) == layouts(torch_trace)
    rebuilt = [b.params for b in torch_trace.ranks[0].layouts[-1].buckets]
    # [3 2] fills the 1 MiB first bucket; the fp32 [1 0] and fp16 [5 4] are left open and
    # come out in torch's hash-map order, not first-seen order (Note [Leftover buckets ...])
    assert rebuilt == [[3, 2], [1, 0], [5, 4]]
    for trace in (torch_trace, mini):  # every rank launched the rebuilt buckets in that order
        for rank in trace.ranks:
            last = rank.iterations[-1]
            assert [b.bucket for b in sorted(last.buckets, key=lambda b: b.launch_ns)] == [0, 1, 2]


@pytest.mark.slow
def test_a_rebuild_that_changes_nothing_is_recorded_by_both(tmp_path):
    """Note [A rebuild is recorded even when nothing moved]: torch rebuilds anyway."""
    torch_trace, mini = record_both(tmp_path, "one_param")
    assert [(lay.from_iteration, lay.kind) for lay in torch_trace.ranks[0].layouts] == \
        [(0, "construction"), (1, "rebuilt")]
    assert layouts(mini) == layouts(torch_trace)
