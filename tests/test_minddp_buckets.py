"""minddp's compute_bucket_assignment_by_size == torch's, on generated parameter lists."""
import random
import sys

import pytest
import torch

from ddpsim import torchcompat
from ddpsim.buckets import BucketCapacityConfig
from ddpsim.minddp import compute_bucket_assignment_by_size
from ddpsim.minddp.construction import build_params_for_reducer

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _params(rng: random.Random, n: int, mixed: bool):
    out = []
    for _ in range(n):
        shape = [rng.choice([1, 3, 17, 64, 256, 1024]) for _ in range(rng.randint(1, 2))]
        dtype = rng.choice(DTYPES) if mixed else torch.float32
        out.append(torch.empty(shape, dtype=dtype))
    return out


LIMITS = [
    [sys.maxsize],
    [1],  # every tensor its own bucket
    [4096],
    [torchcompat.DEFAULT_FIRST_BUCKET_BYTES, 25 * 1024 * 1024],  # the default first cap
    [1000, 50_000],
    [300, 2000, 9000],
]


@pytest.mark.parametrize("mixed", [False, True])
@pytest.mark.parametrize("limits", LIMITS, ids=lambda l: "-".join(map(str, l)))
def test_construction_assignment_matches_torch(limits, mixed):
    rng = random.Random(hash((tuple(limits), mixed)) & 0xFFFF)
    for trial in range(20):
        tensors = _params(rng, rng.randint(1, 40), mixed)
        ours = compute_bucket_assignment_by_size(tensors, limits)
        theirs = torchcompat.compute_bucket_assignment_by_size(tensors, limits)
        assert ours == (theirs[0], theirs[1]), (trial, [t.shape for t in tensors])


@pytest.mark.parametrize("limits", LIMITS[1:], ids=lambda l: "-".join(map(str, l)))
def test_rebuild_assignment_in_ready_order_matches_torch(limits):
    """The rebuild passes tensor_indices (gradient-ready order): no sorting."""
    rng = random.Random(7)
    for _ in range(20):
        tensors = _params(rng, rng.randint(1, 40), mixed=False)
        order = list(range(len(tensors)))
        rng.shuffle(order)
        ordered = [tensors[i] for i in order]
        ours = compute_bucket_assignment_by_size(ordered, limits, (), order)
        theirs = torchcompat.compute_bucket_assignment_by_size(ordered, limits, [], order)
        assert ours == (theirs[0], theirs[1])


def test_sparse_gradient_gets_own_bucket():
    tensors = _params(random.Random(3), 8, mixed=False)
    sparse = [False, True, False, False, True, False, False, False]
    ours = compute_bucket_assignment_by_size(tensors, [4096], sparse)
    assert ours == tuple(torchcompat.compute_bucket_assignment_by_size(tensors, [4096], sparse))


def test_bucket_caps_follow_torch():
    mib = 1024 * 1024
    def caps(cap_mb):
        c = BucketCapacityConfig.create(cap_mb)
        return c.bucket_bytes_cap, c.first_bucket_bytes_cap
    assert caps(None) == (25 * mib, torchcompat.DEFAULT_FIRST_BUCKET_BYTES)
    assert caps(25) == (25 * mib, 25 * mib)  # explicit cap: no small first bucket
    assert caps(0.25) == (mib // 4, mib // 4)


def test_params_for_reducer_skip_frozen_and_dedupe_tied():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(10, 4)
            self.frozen = torch.nn.Linear(4, 4)
            self.frozen.weight.requires_grad_(False)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.emb.weight

    m = Tied()
    params, names, sparse = build_params_for_reducer(m)
    assert names == ["emb.weight", "frozen.bias"]
    assert params[0] is m.emb.weight and sparse == [False, False]
