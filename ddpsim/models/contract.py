"""What a zoo or user model factory returns (see ``ddpsim/models/__init__.py``).

Its own module so that the zoo models can name it without importing the package
that imports them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class Training:
    """What one DDP rank trains: a model, its batches, its loss (``ddpsim.models.Workload`` before)."""

    model: torch.nn.Module
    batch: Callable[[int, int, int, int], tuple]
    loss: Callable
    default_batch_size: int = 32  # samples per rank per iteration
