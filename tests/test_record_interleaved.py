"""Several configurations recorded in the same ranks, taking turns iteration by iteration."""
import pytest

from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record_many


@pytest.mark.slow
def test_interleaved_configs_each_get_a_faithful_trace(tmp_path):
    cfgs = [RecordConfig(model="mlp", iters=3),
            RecordConfig(model="mlp", iters=3, bucket_cap_mb=0.25),
            RecordConfig(model="mlp", iters=3, impl="minddp", bucket_cap_mb=0.25)]
    traces = record_many(cfgs, [tmp_path / f"c{k}.json" for k in range(3)])
    default, small, mini = traces
    assert all(t.complete for t in traces)
    assert len(default.ranks[0].layouts[-1].buckets) < len(small.ranks[0].layouts[-1].buckets)
    as_list = lambda t: [(b.params, b.bytes) for b in t.ranks[0].layouts[-1].buckets]  # noqa: E731
    assert as_list(mini) == as_list(small), "minddp and torch agree when recorded side by side"
    # They really took turns: iteration i of each config before iteration i + 1 of any.
    spans = sorted((it.forward.start_ns, it.end_ns, it.iteration, k)
                   for k, t in enumerate(traces) for it in t.ranks[0].iterations)
    assert [(i, k) for _, _, i, k in spans] == [(i, k) for i in range(3) for k in range(3)]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "one configuration at a time"
