"""The zoo: five small models, each showing one DDP behaviour.

==============  ==================================================================
``mlp``         plain MLP, ~3.1M params (~12.6 MB), one FROZEN parameter; bucket
                sizes (1 MiB first + 25 MiB, 25 MiB, 0.25 MiB) give distinct layouts
``convnet``     small ResNet with BatchNorm2d: buffers to broadcast
``transformer`` GPT-style decoder whose output head is TIED to the token embedding
``branchy``     a branch used only when (iteration + rank) is even: unused
                parameters, so find_unused_parameters=False fails at iteration 1
``shuffled``    parameters defined out of forward order: the construction bucket
                order is wrong until the rebuild
==============  ==================================================================

Each factory takes no arguments and returns a ``ddpsim.models.Training``; see
``ddpsim/models/__init__.py`` for the contract. Batches are deterministic functions
of (iteration, rank, batch_size) and never touch the global RNG.
"""
from __future__ import annotations

from typing import Callable

from ddpsim.models.contract import Training
from ddpsim.models.convnet import convnet
from ddpsim.models.mlp import branchy, mlp, shuffled
from ddpsim.models.transformer import transformer

ZOO: dict[str, Callable[[], Training]] = {
    "mlp": mlp,
    "convnet": convnet,
    "transformer": transformer,
    "branchy": branchy,
    "shuffled": shuffled,
}

__all__ = ["ZOO"]
