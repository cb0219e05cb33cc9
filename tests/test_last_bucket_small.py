"""``DDP_SET_LAST_BUCKET_CAP=1``: torch's switch that puts the rebuild's small bucket last.

The oracle is torch 2.13's DDP on two gloo ranks, read from its logging data after the rebuild,
with minddp beside it in the same processes and the same environment; the simulator's
``rebuilt_layout`` is checked against the same layouts. Note [The small bucket last] in
ddpsim/buckets.py says what torch does.
"""
import os

import pytest
from torch import nn

from ddpsim import torchcompat
from ddpsim.buckets import MAXSIZE, BucketCapacityConfig, TensorSpec, rebuilt_layout
from ddpsim.ranks import run_ranks
from tests.test_bucket_cap_list import SIZES, _layout, _train

CAPS = [(0.006, None), (0.002, None), (None, None), (None, (0.003, 0.005)), (None, (0.001, 0.01))]
ENVS = [None, "1", "0", "true"]  # only exactly "1" turns it on


def _both_in_each_environment(rank, world):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    out = []
    for env in ENVS:
        os.environ.pop("DDP_SET_LAST_BUCKET_CAP", None)
        if env is not None:
            os.environ["DDP_SET_LAST_BUCKET_CAP"] = env
        for cap, caps in CAPS:
            opts = dict(bucket_cap_mb=cap, bucket_cap_mb_list=caps and list(caps))
            theirs = _train(lambda m: nn.parallel.DistributedDataParallel(m, **opts), _recorded_caps)
            out.append((theirs[1], _train(lambda m: MinDDP(m, **opts))[1], theirs[2]))
    return out


def _recorded_caps(ddp):
    """The caps the recorder reads for torch's rebuilt buckets, and the caps minddp built them under."""
    observed = [{"params": params} for params, _ in _layout(ddp)]
    return torchcompat.layout_caps(torchcompat.bucket_caps(ddp), list(ddp.module.parameters()), observed,
                                   construction=False, static_graph=False, find_unused=False)


@pytest.mark.slow
def test_minddp_and_the_simulator_put_the_small_bucket_where_torch_does():
    results = run_ranks(_both_in_each_environment, 2, timeout=240)
    assert results[0] == results[1]
    specs, ready = [TensorSpec(k * k * 4) for k in SIZES], list(range(len(SIZES)))[::-1]
    cases = [(env, cap, caps) for env in ENVS for cap, caps in CAPS]
    for (env, cap, caps), (theirs, ours, recorded_caps) in zip(cases, results[0]):
        assert ours == theirs, (env, cap, caps)
        config = BucketCapacityConfig.create(cap, caps)
        layout, built_caps = rebuilt_layout(specs, ready, config, last_bucket_small=env == "1")
        assert layout == [params for params, _ in theirs], (env, cap, caps)
        assert recorded_caps == [c if c is not None else MAXSIZE for c in built_caps], (env, cap, caps)
    switched = dict(zip(cases, (theirs for theirs, _, _ in results[0])))
    assert [p for p, _ in switched[("1", 0.006, None)]] == [[4, 5], [0, 1, 2, 3]]  # Note [The small bucket last]
    assert [p for p, _ in switched[(None, 0.006, None)]] == [[5, 4, 3, 2], [1, 0]]


def test_the_simulator_puts_the_small_bucket_last_when_asked():
    """The what-if (``SimConfig.last_bucket_small``, ``simulate --last-bucket-small``): torch's rebuild with
    the variable set, over the simulated run's ready order; on ResNet-50 at 64 H100s the last bucket's
    allreduce, the one the backward waits for, is the small one."""
    from ddpsim.sim import SimConfig, simulate, synthetic

    w = synthetic("resnet50", "h100-ib400")
    runs = {small: simulate(w, SimConfig(world_size=64, iters=4, last_bucket_small=small)) for small in (False, True)}
    for small, (trace, _) in runs.items():
        rebuilt = trace.ranks[0].layouts[-1]
        ready = [i for b in runs[False][0].ranks[0].layouts[-1].buckets for i in b.params]
        specs = [p.spec for p in w.params]
        assert [list(b.params) for b in rebuilt.buckets] == rebuilt_layout(
            specs, ready, BucketCapacityConfig.create(), last_bucket_small=small)[0]
        caps = [b.cap_bytes for b in rebuilt.buckets]
        assert (caps[-1] if small else caps[0]) == 2 ** 20 and (caps[0] if small else caps[-1]) == 25 * 2 ** 20
    assert runs[True][1]["exposed_comm_s"] < runs[False][1]["exposed_comm_s"]


@pytest.mark.slow
def test_a_recording_keeps_the_switch_and_its_what_ifs_follow_it(record, monkeypatch):
    """Recorded with DDP_SET_LAST_BUCKET_CAP=1, the trace says so; its replay plays the recorded layouts,
    and a what-if with another cap builds torch's layout under the same rule."""
    from ddpsim.learn import learn, replay_config
    from ddpsim.sim import simulate

    monkeypatch.setenv("DDP_SET_LAST_BUCKET_CAP", "1")
    trace = record(model="mlp", world_size=2, iters=3, bucket_cap_mb=0.05)
    assert trace.meta["options"]["last_bucket_small"] is True
    recorded = [list(b.params) for b in trace.ranks[0].layouts[-1].buckets]
    w = learn(trace)
    replay, _ = simulate(w, replay_config(w, trace))
    assert [list(b.params) for b in replay.ranks[0].layouts[-1].buckets] == recorded
    what_if, _ = simulate(w, replay_config(w, trace, bucket_cap_mb=0.02))
    ready = [i for b in recorded[::-1] for i in b][::-1]  # the recorded buckets were built over the reversed order
    specs, config = [p.spec for p in w.params], BucketCapacityConfig.create(0.02)
    assert [list(b.params) for b in what_if.ranks[0].layouts[-1].buckets] == rebuilt_layout(
        specs, ready, config, last_bucket_small=True)[0]
    monkeypatch.delenv("DDP_SET_LAST_BUCKET_CAP")
    assert "last_bucket_small" not in record(model="mlp", world_size=2, iters=2, name="plain").meta["options"]
