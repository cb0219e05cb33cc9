"""What a zoo or user model factory returns (see ``ddpsim/models/__init__.py``).

Its own module so that the zoo models can name it without importing the package
that imports them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # the app reads the zoo names without importing torch
    import torch


@dataclass
class Training:
    """What one DDP rank trains: a model, its batches, its loss (``ddpsim.models.Workload`` before)."""

    model: torch.nn.Module
    batch: Callable[[int, int, int, int], tuple]
    loss: Callable
    default_batch_size: int = 32  # samples per rank per iteration
