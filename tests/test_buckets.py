"""ddpsim.buckets equals torch's own ``_compute_bucket_assignment_by_size``, on both paths.

The construction path (no tensor_indices: buckets sorted by smallest index) and the
rebuild path (tensor_indices in gradient-ready order: the leftover buckets come out in
the order of torch's hash map, Note [Leftover buckets follow the hash map]).
"""
import warnings

import pytest
import torch
from ddpsim import torchcompat
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddpsim.buckets import (MAXSIZE, MIB, BucketCapacityConfig, BucketOrder, TensorSpec,
                            compute_bucket_assignment_by_size, construction_layout,
                            leftover_key_order, rebuilt_layout, spec_of)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
DEVICES = ["cpu", "meta"]  # meta: a second device type, to check the device's part of the hash
CASES = {"construction": 0, "rebuild": 0}


def torch_oracle(tensors, limits, sparse, indices):
    return torchcompat.compute_bucket_assignment_by_size(tensors, limits, sparse, indices)


@st.composite
def params(draw):
    """A parameter list: 1-4 dtypes (sometimes 2 devices), sizes, caps and a ready order."""
    dtypes = draw(st.lists(st.sampled_from(DTYPES), min_size=1, max_size=4, unique=True))
    devices = ["cpu"] + (["meta"] if draw(st.booleans()) and len(dtypes) < 4 else [])
    n = draw(st.integers(1, 24))
    kinds = draw(st.lists(st.tuples(st.sampled_from(dtypes), st.sampled_from(devices)),
                          min_size=n, max_size=n))
    numels = draw(st.lists(st.integers(1, 3000), min_size=n, max_size=n))
    limits = draw(st.lists(st.integers(1, 8000), min_size=1, max_size=3))
    order = draw(st.permutations(list(range(n))))
    sparse = draw(st.lists(st.booleans(), min_size=n, max_size=n)) if draw(st.integers(0, 9)) == 0 \
        else [False] * n
    tensors = [torch.empty(k, dtype=dt, device=dev) for k, (dt, dev) in zip(numels, kinds)]
    return tensors, limits, order, sparse


@settings(max_examples=1200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params())
def test_equals_torch_on_both_paths(case):
    tensors, limits, order, sparse = case
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # construction: tensors in definition order, no tensor_indices
        ours = compute_bucket_assignment_by_size([spec_of(t) for t in tensors], limits, sparse)
        assert ours == torch_oracle(tensors, limits, sparse, [])
        CASES["construction"] += 1
        # rebuild: tensors in `order`, tensor_indices = order
        ordered = [tensors[i] for i in order]
        ours = compute_bucket_assignment_by_size([spec_of(t) for t in ordered], limits, sparse, order)
        assert ours == torch_oracle(ordered, limits, sparse, order)
        CASES["rebuild"] += 1


def test_case_count_reported():
    """Runs after the property test in file order: how many cases each path saw."""
    if not any(CASES.values()):
        pytest.skip("the property test did not run in this session (-k?)")
    print(f"\nbucket assignment vs torch: {CASES}")
    assert CASES["construction"] >= 1000 and CASES["rebuild"] >= 1000


def test_mixed_precision_rebuild_is_not_first_seen_order():
    """The case of issue 17: fp16 and fp32 buckets left open at the end of a rebuild."""
    ts = [torch.empty(100, dtype=torch.float32), torch.empty(100, dtype=torch.float32),
          torch.empty(100, dtype=torch.float16), torch.empty(100, dtype=torch.float16),
          torch.empty(100, dtype=torch.float64), torch.empty(100, dtype=torch.float64)]
    order = [5, 4, 3, 2, 1, 0]
    ordered = [ts[i] for i in order]
    theirs = torch_oracle(ordered, [MIB], [], order)
    ours = compute_bucket_assignment_by_size([spec_of(t) for t in ordered], [MIB], (), order)
    assert ours == theirs
    first_seen = [[5, 4], [3, 2], [1, 0]]
    assert theirs[0] != first_seen  # the hash map's order is not first-seen order


def test_many_keys_rehash_like_libstdcxx():
    """Up to 24 (dtype, device) keys: the map grows from 13 to 29 buckets on the 14th."""
    keys = [(str(dt).replace("torch.", ""), dev) for dt in DTYPES for dev in DEVICES]
    for n in range(1, len(keys) + 1):
        chosen = keys[:n]
        tensors = [torch.empty(1, dtype=getattr(torch, d), device=dev) for d, dev in chosen]
        theirs = torch_oracle(tensors, [MAXSIZE], [], list(range(n)))[0]
        assert [chosen[b[0]] for b in theirs] == leftover_key_order(chosen)


def test_layout_helpers_and_caps():
    specs = [TensorSpec(400, "float32"), TensorSpec(400, "float32"), TensorSpec(200, "float16")]
    caps = BucketCapacityConfig(500, (), 300)
    assert construction_layout(specs, caps, static_graph=False, find_unused=False) == ([[2], [0, 1]], [None, None])
    assert rebuilt_layout(specs, [2, 1, 0], caps)[0] == [[1], [0], [2]]  # fp32 left over first
    assert BucketCapacityConfig.create(None) == BucketCapacityConfig(25 * MIB, (), MIB)
    assert BucketCapacityConfig.create(25) == BucketCapacityConfig(25 * MIB, (), 25 * MIB)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        BucketCapacityConfig.create(float("nan"))
    with pytest.raises(ValueError, match="unknown dtype"):
        compute_bucket_assignment_by_size([TensorSpec(4, "float99")], [8])


def test_bucket_order_parse():
    assert BucketOrder.parse(None) is BucketOrder.TORCH
    assert BucketOrder.parse("definition") is BucketOrder.DEFINITION
    with pytest.raises(ValueError, match="one of"):
        BucketOrder.parse("sideways")
    with pytest.raises(ValueError, match="not available"):
        BucketOrder.parse("random", allowed=(BucketOrder.TORCH,))


def test_one_order_vocabulary_everywhere():
    from ddpsim.minddp.ddp import DistributedDataParallel
    from ddpsim.record.config import RecordConfig
    from ddpsim.sim.workload import ORDERS

    assert set(ORDERS) == {o.value for o in BucketOrder}  # the simulator runs every order
    # record --order: 'ready' was the old name of torch's order, migrated on validate
    assert RecordConfig(impl="minddp", order="ready").validate().order == "torch"
    # minddp runs the orders a real run can follow; 'ready' needs the ready order before iteration 0
    with pytest.raises(ValueError, match="not available"):
        DistributedDataParallel(torch.nn.Linear(2, 2), bucket_order="ready")
