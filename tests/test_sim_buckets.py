"""The simulator's bucket assignment equals torch's (_compute_bucket_assignment_by_size)."""
import random

import pytest
import torch

from ddpsim import torchcompat
from ddpsim.sim import Link, ParamSpec, Workload, compute_bucket_assignment, synthetic
from ddpsim.sim.api import SimConfig, plan_layouts
from ddpsim.sim.workload import MIB, BucketCapacityConfig, construction_layout, ordered_layout

DTYPES = {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64}
SIZE = {"float32": 4, "float16": 2, "float64": 8}


def table(seed, n, dtypes=("float32",)):
    rng = random.Random(seed)
    numels = [rng.choice([1, 7, 64, 1000, 4096, 65536, 262144, 300000, 1 << 20]) for _ in range(n)]
    dts = [rng.choice(dtypes) for _ in range(n)]
    return numels, dts


def oracle(numels, dts, caps, order=None):
    """torch's assignment. With ``order`` (the rebuild path, reducer.cpp rebuild_buckets) the
    tensors are passed already in that order and ``tensor_indices`` labels them."""
    tensors = [torch.empty(n, dtype=DTYPES[d]) for n, d in zip(numels, dts)]
    if order is None:
        return torchcompat.compute_bucket_assignment_by_size(tensors, caps)
    return torchcompat.compute_bucket_assignment_by_size([tensors[i] for i in order], caps,
                                                   [False] * len(tensors), order)


CAPS = [[1 * MIB, 25 * MIB], [25 * MIB], [MIB // 4], [3 * MIB, MIB], [2 ** 63 - 1], [1, 1]]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("caps", CAPS)
def test_definition_order_matches_torch(seed, caps):
    numels, dts = table(seed, 40 + seed * 20)
    sizes = [n * SIZE[d] for n, d in zip(numels, dts)]
    assert compute_bucket_assignment(sizes, caps, dts) == tuple(map(list, oracle(numels, dts, caps)))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("caps", CAPS[:4])
def test_given_order_matches_torch(seed, caps):
    numels, dts = table(seed, 50)
    order = list(range(50))
    random.Random(seed).shuffle(order)
    sizes = [n * SIZE[d] for n, d in zip(numels, dts)]
    assert compute_bucket_assignment(sizes, caps, dts, order) == tuple(
        map(list, oracle(numels, dts, caps, order)))


@pytest.mark.parametrize("seed", range(4))
def test_mixed_dtypes_match_torch(seed):
    numels, dts = table(seed, 60, ("float32", "float16", "float64"))
    sizes = [n * SIZE[d] for n, d in zip(numels, dts)]
    caps = [MIB, 4 * MIB]
    assert compute_bucket_assignment(sizes, caps, dts) == tuple(map(list, oracle(numels, dts, caps)))
    order = list(reversed(range(60)))
    ours, theirs = compute_bucket_assignment(sizes, caps, dts, order), oracle(numels, dts, caps, order)
    # torch appends the unfinished bucket of each dtype in hash-map order: the same order here
    assert ours == tuple(map(list, theirs))


def caps_bytes(cap_mb, first_mb=None):
    c = BucketCapacityConfig.create(cap_mb, None, first_mb)
    return c.first_bucket_bytes_cap, c.bucket_bytes_cap


def test_caps_follow_torch_213_rules():
    assert caps_bytes(None) == (MIB, 25 * MIB)  # default: small first bucket
    assert caps_bytes(25) == (25 * MIB, 25 * MIB)  # explicit 25: no small first bucket
    assert caps_bytes(0.25) == (MIB // 4, MIB // 4)
    assert caps_bytes(None, 2) == (2 * MIB, 25 * MIB)
    assert caps_bytes(0) == caps_bytes(1e-9) == (0, 0)  # torch takes them: a bucket per parameter
    for bad in (float("nan"), float("inf"), "5"):
        with pytest.raises(ValueError):
            caps_bytes(bad)


@pytest.mark.parametrize("arch", ["resnet50", "gpt2", "bert-large"])
@pytest.mark.parametrize("cap_mb", [None, 1, 25])
def test_arch_layouts_match_torch(arch, cap_mb):
    w = synthetic(arch, "a100-nvlink")
    caps_config = BucketCapacityConfig.create(cap_mb)
    first, cap = caps_bytes(cap_mb)
    numels = [p.bytes // 4 for p in w.params]
    dts = ["float32"] * len(numels)
    # construction (find_unused=True): [first, cap] over definition order, then reversed
    caps = [first, cap] if first < cap else [cap]
    expected = list(reversed(oracle(numels, dts, caps)[0]))
    assert construction_layout(w, caps_config, static_graph=False, find_unused=True)[0] == expected
    # rebuild: gradient-ready order with [first, cap]
    assert ordered_layout(w, w.ready_order, caps_config)[0] == oracle(numels, dts, [first, cap],
                                                                     w.ready_order)[0]


def test_arch_tables_have_published_sizes():
    r50 = synthetic("resnet50", "v100-nvlink")
    assert r50.n_params == 161 and sum(p.bytes for p in r50.params) // 4 == 25_557_032
    gpt = synthetic("gpt2", "a100-nvlink")
    assert round(sum(p.bytes for p in gpt.params) / 4 / 1e6, 1) == 124.4
    bert = synthetic("bert-large", "h100-ib400")
    assert 330e6 < sum(p.bytes for p in bert.params) / 4 < 345e6


def test_trace_layouts_carry_caps():
    w = Workload("t", [ParamSpec(i, f"p{i}", MIB) for i in range(4)], [3, 2, 1, 0], [1.0] * 4, Link())
    _, layouts, _ = plan_layouts(w, SimConfig(world_size=2, iters=2))
    assert layouts[0].buckets[0].cap_bytes is None  # the single iteration-0 bucket
    assert [b.cap_bytes for b in layouts[1].buckets] == [MIB, 25 * MIB]
    assert [b.params for b in layouts[1].buckets] == [[3], [2, 1, 0]]
