"""--model path/to/file.py:factory: a model defined only here, in this test file."""
import os

import pytest
import torch
import torch.nn as nn


class TwoTower(nn.Module):
    """Not in the zoo: two towers whose outputs are summed."""

    def __init__(self):
        super().__init__()
        self.left = nn.Linear(24, 48)
        self.right = nn.Linear(24, 48)
        self.head = nn.Linear(48, 3)

    def forward(self, a, b):
        return self.head(torch.relu(self.left(a) + self.right(b)))


def factory():
    def batch(iteration, rank, world_size, batch_size):
        g = torch.Generator().manual_seed(7919 * iteration + rank)
        a, b = torch.randn(batch_size, 24, generator=g), torch.randn(batch_size, 24, generator=g)
        return (a, b), torch.randint(0, 3, (batch_size,), generator=g)
    return TwoTower(), batch, nn.functional.cross_entropy


@pytest.mark.slow
def test_users_own_model_is_recorded(record):
    spec = f"{os.path.abspath(__file__)}:factory"
    trace = record(model=spec, world_size=2, iters=3, batch_size=8)
    assert trace.complete and trace.meta["model"] == spec
    assert [p["name"] if isinstance(p, dict) else p.name for p in trace.params] == [
        "left.weight", "left.bias", "right.weight", "right.bias", "head.weight", "head.bias"]
    it = trace.ranks[1].iterations[2]
    assert sorted(g.param for g in it.grad_ready) == list(range(6))
    assert it.buckets, "its gradients were allreduced"
