"""A model with a layer no rank ever uses, for ``skip_all_reduce_unused_params``.

``python -m ddpsim record --model tests/unused_models.py:spare_mlp --find-unused-parameters
--skip-all-reduce-unused-params --bucket-cap-mb 0.01`` (10,485 bytes): the buckets are
[spare.bias, head], [spare.weight], [inp] (reverse definition order), and torch 2.13 never
allreduces the second; spare.bias, unused too, is reduced with head's bucket.
"""
import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.models import Training


class SpareMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 160)  # params 0, 1: 10,880 bytes
        self.spare = nn.Linear(160, 17)  # params 2, 3: 10,948 bytes, never used
        self.head = nn.Linear(160, 10)  # params 4, 5: 6,440 bytes

    def forward(self, x):
        return self.head(F.relu(self.inp(x)))


def spare_mlp() -> Training:
    def batch(iteration, rank, world_size, batch_size):
        g = torch.Generator().manual_seed(1000 * iteration + rank)
        return torch.randn(batch_size, 16, generator=g), torch.randint(0, 10, (batch_size,), generator=g)

    return Training(SpareMLP(), batch, F.cross_entropy, default_batch_size=8)
