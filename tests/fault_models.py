"""Models that fail on purpose, for tests/test_record_faults.py (loaded by the ranks by path)."""
import os
import signal

import torch
import torch.nn as nn


def _small_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))


def _batch(it, rank, bs):
    g = torch.Generator().manual_seed(1000 * it + rank)
    return torch.randn(bs, 16, generator=g), torch.randint(0, 4, (bs,), generator=g)


def raising_factory():
    """Rank 1's data raises at iteration 2."""
    def batch(it, rank, world_size, bs):
        if rank == 1 and it == 2:
            raise RuntimeError("injected failure in rank 1's batch")
        return _batch(it, rank, bs)
    return _small_model(), batch, nn.functional.cross_entropy


def dying_factory():
    """Rank 1 is killed (SIGKILL, no goodbye) at iteration 2."""
    def batch(it, rank, world_size, bs):
        if rank == 1 and it == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return _batch(it, rank, bs)
    return _small_model(), batch, nn.functional.cross_entropy


def blocking_factory():
    """Rank 1's forward blocks forever at iteration 2 (a model that hangs, no signal)."""
    import time

    class Blocking(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _small_model()
            self.calls = 0

        def forward(self, x):
            if int(os.environ.get("RANK", "0")) == 1 and self.calls == 2:
                time.sleep(3600)
            self.calls += 1
            return self.net(x)

    return Blocking(), lambda it, rank, world_size, bs: _batch(it, rank, bs), nn.functional.cross_entropy


class _TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 4)

    def forward(self, x, mask):  # the batch gives one input: a TypeError on every rank
        return self.a(x)


def wrong_forward_factory():
    """A forward that takes more inputs than the batch gives: every rank's TypeError, at once."""
    return _TwoInputs(), lambda it, rank, world_size, bs: _batch(it, rank, bs), nn.functional.cross_entropy
