"""A mixed-precision model for the recorder tests: fp32 layers and an fp16 head.

``python -m ddpsim record --model tests/mixed_models.py:mixed_mlp``. Gradients arrive
head first (fp16), then the big fp32 layer, which fills a 1 MiB bucket, then the small
fp32 input layer: the rebuild leaves one fp16 and one fp32 bucket open, so their order
comes from torch's hash map (Note [Leftover buckets follow the hash map]).
"""
import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.models import Training


class MixedMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(64, 512)  # fp32, params 0, 1
        self.mid = nn.Linear(512, 1024)  # fp32, 2 MiB: params 2, 3
        self.head = nn.Linear(1024, 10).half()  # fp16: params 4, 5

    def forward(self, x):
        h = F.relu(self.mid(F.relu(self.inp(x))))
        return self.head(h.half()).float()


def mixed_mlp() -> Training:
    def batch(iteration, rank, world_size, batch_size):
        g = torch.Generator().manual_seed(1000 * iteration + rank)
        x = torch.randn(batch_size, 64, generator=g)
        return x, torch.randint(0, 10, (batch_size,), generator=g)

    return Training(MixedMLP(), batch, F.cross_entropy, default_batch_size=16)


class OneLinear(nn.Module):
    """One parameter: torch's rebuild gives back the construction layout."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(64, 10, bias=False)

    def forward(self, x):
        return self.lin(x)


def one_param() -> Training:
    w = mixed_mlp()
    return Training(OneLinear(), w.batch, F.cross_entropy, default_batch_size=16)
