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
