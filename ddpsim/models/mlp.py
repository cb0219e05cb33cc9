"""Multi-layer perceptrons of the zoo: ``mlp``, ``branchy`` and ``shuffled``.

All three are classifiers of Gaussian inputs whose labels come from a fixed random
linear teacher (see ``_data.py``). Loss: cross-entropy.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.models.contract import Training
from ddpsim.models._data import batch_generator, classify, teacher_generator

N_CLASSES = 10


def _classification_batch(base: int, in_features: int):
    teacher = torch.randn(in_features, N_CLASSES, generator=teacher_generator(base))

    def batch(iteration: int, rank: int, world_size: int, batch_size: int):
        g = batch_generator(base, iteration, rank)
        x = torch.randn(batch_size, in_features, generator=g)
        return x, classify(x, teacher)

    return batch


# --------------------------------------------------------------------------- mlp


class MLP(nn.Module):
    """A plain MLP, 256 -> 512 -> 1024 -> 1024 -> 1024 -> 512 -> 10, with ReLUs.

    The input projection ``proj.weight`` (256x512, no bias) is FROZEN
    (``requires_grad=False``): it is a fixed random feature map. DDP's reducer skips
    it, so DDP sees 10 parameters (5 Linear layers x weight, bias) out of the
    module's 11, about 3.1M trainable floats (~12.6 MB of gradients). That size
    makes the default 1 MiB first bucket + 25 MiB cap, an explicit 25 MiB cap and a
    0.25 MiB cap give three different bucket layouts.
    """

    def __init__(self, in_features: int = 256, widths=(512, 1024, 1024, 1024, 512)):
        super().__init__()
        self.proj = nn.Linear(in_features, widths[0], bias=False)
        self.proj.weight.requires_grad_(False)  # frozen: not in DDP's parameter list
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.head = nn.Linear(widths[-1], N_CLASSES)

    def forward(self, x):
        h = self.proj(x)
        for layer in self.layers:
            h = F.relu(layer(h))
        return self.head(h)


def mlp() -> Training:
    """MLP with one frozen parameter (see ``MLP``); batch 64 of 256-d inputs."""
    return Training(MLP(), _classification_batch(11_000, 256), F.cross_entropy,
                    default_batch_size=64)


# --------------------------------------------------------------------------- branchy


class Branchy(nn.Module):
    """A trunk, an optional residual branch, a head: ``model(x, use_branch)``.

    ``use_branch`` is a 0-d bool tensor. When it is true the output is
    ``head(h + branch(h))``, otherwise ``head(h)``, and the branch's 4 parameters
    (``branch.0.weight/bias``, ``branch.2.weight/bias``, DDP indices 4-7) get no
    gradient on that rank.
    """

    def __init__(self, in_features: int = 128, width: int = 768):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(in_features, width), nn.ReLU(),
                                   nn.Linear(width, width), nn.ReLU())
        self.branch = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))
        self.head = nn.Linear(width, N_CLASSES)

    def forward(self, x, use_branch):
        h = self.trunk(x)
        if bool(use_branch):
            h = h + self.branch(h)
        return self.head(h)


def branch_used(iteration: int, rank: int) -> bool:
    """Whether ``branchy`` uses its branch: only when (iteration + rank) is even."""
    return (iteration + rank) % 2 == 0


def branchy() -> Training:
    """A model whose branch is skipped on some ranks/iterations.

    The batch decides: inputs are ``(x, use_branch)`` with ``use_branch =
    (iteration + rank) % 2 == 0`` (see ``branch_used``). So with 2 ranks the branch
    is used by rank 0 and unused by rank 1 in iteration 0, and the other way round
    in iteration 1; with 1 rank it is unused on every odd iteration. Torch DDP with
    ``find_unused_parameters=False`` therefore fails at the forward of iteration 1
    (the branch's grads never arrived on rank 1 in iteration 0);
    ``find_unused_parameters=True`` handles it.
    """
    base = 22_000
    data = _classification_batch(base, 128)

    def batch(iteration: int, rank: int, world_size: int, batch_size: int):
        x, y = data(iteration, rank, world_size, batch_size)
        return (x, torch.tensor(branch_used(iteration, rank))), y

    return Training(Branchy(), batch, F.cross_entropy, default_batch_size=256)


# --------------------------------------------------------------------------- shuffled

# Forward order of the hidden blocks -> the order they are *defined* (registered) in.
SHUFFLED_DEFINITION_ORDER = (7, 2, 10, 0, 13, 5, 11, 3, 8, 1, 12, 6, 9, 4)


class Shuffled(nn.Module):
    """A residual MLP whose parameters are defined out of forward order.

    Forward: ``inp`` -> ``block0`` ... ``block13`` (each ``h + relu(Linear(h)) / 2``,
    768x768) -> ``out``. Definition (registration) order: ``out`` first, then the
    blocks in the scrambled order ``SHUFFLED_DEFINITION_ORDER``, then ``inp`` last.
    DDP assumes gradients arrive in reverse definition order, so its construction
    layout (and the single bucket of iteration 0) is wrong for this model; the
    rebuild at iteration 1 reorders buckets by the observed arrival order.
    ~8.5M parameters (~34 MB), so the default 1 MiB + 25 MiB caps give 3 buckets,
    both at construction and after the rebuild.
    """

    def __init__(self, in_features: int = 256, width: int = 768, depth: int = 14):
        super().__init__()
        order = [i for i in SHUFFLED_DEFINITION_ORDER if i < depth]
        if sorted(order) != list(range(depth)):
            raise ValueError(f"depth must be at most {len(SHUFFLED_DEFINITION_ORDER)}, not {depth}")
        self.out = nn.Linear(width, N_CLASSES)
        for i in order:
            self.add_module(f"block{i}", nn.Linear(width, width))
        self.inp = nn.Linear(in_features, width)
        self.depth = depth

    def forward(self, x):
        h = F.relu(self.inp(x))
        for i in range(self.depth):  # the true order
            h = h + 0.5 * F.relu(getattr(self, f"block{i}")(h))
        return self.out(h)


def shuffled() -> Training:
    """Residual MLP with scrambled parameter definition order (see ``Shuffled``)."""
    return Training(Shuffled(), _classification_batch(33_000, 256), F.cross_entropy,
                    default_batch_size=32)
