"""Several configurations recorded in the same ranks, taking turns iteration by iteration."""
import pytest

from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record_many


@pytest.mark.slow
def test_interleaved_configs_each_get_a_faithful_trace(tmp_path):
    cfgs = [RecordConfig(model="mlp", iters=3, probe_allreduce_bytes=[4096, 1 << 20]),
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
    # Note [Calibrate in the recording's ranks]: one timed allreduce per size after each round
    probe = default.meta["allreduce_probe"]
    assert [n for n, _, _ in probe] == [4096, 1 << 20]
    assert all(wall > 0 and cpu >= 0 for _, wall, cpu in probe)
    assert "allreduce_probe" not in small.meta, "only the config that asked for it"
    # the rounds did not move: the probe runs between rounds, outside every iteration
    assert all(b[0] - a[1] > 0 for a, b in zip(spans[2::3], spans[3::3]))


def test_probe_sizes_must_be_positive():
    from ddpsim.errors import CLIError

    with pytest.raises(CLIError, match="probe_allreduce_bytes must be positive"):
        RecordConfig(probe_allreduce_bytes=[4096, 0]).validate()
