"""Deterministic synthetic data shared by the zoo models.

Every batch is drawn from a local ``torch.Generator`` seeded from (base, iteration,
rank), never from the global RNG, so ``batch(i, r, w, n)`` gives the same tensors on
every call and the recorder's ``torch.manual_seed(seed)`` only affects the weights.
Targets come from a fixed random "teacher" (also from a local generator), so they
are learnable and identical whatever ``--seed`` is.
"""
from __future__ import annotations

import torch

_STRIDE = 1_000_003  # iteration stride of the batch seed; > any plausible rank count


def batch_generator(base: int, iteration: int, rank: int) -> torch.Generator:
    """The generator for one rank's batch at one iteration."""
    if iteration < 0 or rank < 0:
        raise ValueError(f"iteration and rank must be >= 0, not {iteration}, {rank}")
    return torch.Generator().manual_seed(base + _STRIDE * iteration + rank)


def teacher_generator(base: int) -> torch.Generator:
    """The generator for a model's fixed teacher (independent of every batch seed)."""
    return torch.Generator().manual_seed(base + 7)


def classify(x: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Class labels from a fixed linear teacher: argmax(x @ teacher)."""
    return (x.flatten(1) @ teacher).argmax(dim=1)
