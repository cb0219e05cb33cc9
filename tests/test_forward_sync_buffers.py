"""torch 2.13's two buffer flags, ``broadcast_buffers`` (deprecated) and ``forward_sync_buffers``:
minddp against torch's DDP on real gloo ranks (Note [Two buffer flags] in ddpsim/minddp/construction.py)."""
import warnings

import pytest
import torch
from torch import nn

from ddpsim.minddp.construction import BOTH_BUFFER_FLAGS, BROADCAST_BUFFERS_DEPRECATED, buffer_sync_flags
from distutil import run_ranks
from torchgates import needs_ddp

UNSET = "unset"
VALUES = (UNSET, None, True, False)


class RankBuffer(nn.Module):
    """A Linear and a buffer that holds the rank it was built on."""

    def __init__(self, rank):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("b", torch.full((1,), float(rank)))

    def forward(self, x):
        return self.lin(x) + self.b


def _one(rank, impl, broadcast, forward_sync):
    """The buffer after construction and after a forward (each rank set it to 10 + rank before),
    the buffer warnings, and ``forward_sync_buffers`` after flipping the ``broadcast_buffers`` property."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.manual_seed(0)
    model = RankBuffer(rank)
    kw = {k: v for k, v in (("broadcast_buffers", broadcast), ("forward_sync_buffers", forward_sync)) if v != UNSET}
    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ddp = cls(model, **kw)
    said = [[w.category.__name__, str(w.message)] for w in caught if "buffers" in str(w.message)]
    after_init = model.b.item()
    with torch.no_grad():
        model.b.fill_(10 + rank)
    ddp(torch.ones(1, 2)).sum().backward()
    after_forward = model.b.item()
    ddp.broadcast_buffers = not ddp.broadcast_buffers
    return [said, after_init, after_forward, ddp.forward_sync_buffers]


def _every_combination(rank, world):
    return [[repr(b), repr(f), impl, *_one(rank, impl, b, f)]
            for b in VALUES for f in VALUES for impl in ("torch", "minddp")]


@pytest.mark.slow
@needs_ddp("forward_sync_buffers")
def test_minddp_syncs_buffers_as_torch_for_every_combination_of_the_two_flags():
    ranks = run_ranks(_every_combination, 2, timeout=300)
    for rank in ranks:
        for theirs, ours in zip(rank[0::2], rank[1::2]):
            assert theirs[:2] == ours[:2] and theirs[3:] == ours[3:], (theirs, ours)
    rank1 = {(row[0], row[1]): row for row in ranks[1] if row[2] == "minddp"}
    # broadcast_buffers=False alone: rank 1 keeps its own buffer at construction and at the forward
    assert rank1[("False", "'unset'")][4:6] == [1.0, 11.0]
    # forward_sync_buffers=False: rank 0's buffer at construction, its own after the forward
    assert rank1[("'unset'", "False")][4:6] == [0.0, 11.0]
    assert rank1[("False", "True")][4:6] == [0.0, 10.0]  # both given: forward_sync_buffers wins


def test_the_flags_and_warnings_follow_torch_2_13():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert buffer_sync_flags(None, None) == (True, True)
        assert buffer_sync_flags(None, False) == (False, True)
        assert buffer_sync_flags(None, True) == (True, True)
    for broadcast in (True, False):
        with pytest.warns(FutureWarning) as told:
            assert buffer_sync_flags(broadcast, None) == (broadcast, broadcast)
        assert [str(w.message) for w in told] == [BROADCAST_BUFFERS_DEPRECATED]
        with pytest.warns(FutureWarning) as told:
            assert buffer_sync_flags(broadcast, False) == (False, True)
        assert [str(w.message) for w in told] == [BOTH_BUFFER_FLAGS]
