"""minddp's errors: raised where the mistake shows, naming the parameters, no hang."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from distutil import RankFailure, run_ranks


class WithUnused(nn.Module):
    """``extra`` never takes part in the output: it never gets a gradient."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.extra = nn.Linear(8, 8)
        self.b = nn.Linear(8, 2)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class CheckpointedTwice(nn.Module):
    """``shared`` runs under two reentrant checkpoints: its hooks fire twice."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.shared = nn.Linear(8, 8)

    def forward(self, x):
        h = self.a(x)
        h = checkpoint(self.shared, h, use_reentrant=True)
        return checkpoint(self.shared, h, use_reentrant=True)


def _where_it_fails(ddp, x):
    """Run two iterations; return (phase, message) of the first exception."""
    for it in range(2):
        try:
            out = ddp(x)
        except RuntimeError as e:
            return f"forward {it}", str(e)
        try:
            out.sum().backward()
        except RuntimeError as e:
            return f"backward {it}", str(e)
    return "none", ""


def unused_param_rank(rank, world_size):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    x = torch.randn(4, 8)
    torch.manual_seed(0)
    mine = _where_it_fails(MinDDP(WithUnused()), x)
    torch.manual_seed(0)
    theirs = _where_it_fails(nn.parallel.DistributedDataParallel(WithUnused()), x)
    return mine, theirs


@pytest.mark.slow  # real gloo ranks
def test_missing_gradient_raises_at_the_next_forward_as_torch_does_with_names():
    """torch lets a reduction finish over several backward passes before the next forward (one per
    head, or autograd.grad first): the next forward is where a missing gradient shows."""
    for mine, theirs in run_ranks(unused_param_rank, 2, timeout=60):
        phase, msg = mine
        assert phase == "forward 1" == theirs[0], (mine, theirs)
        assert "extra.weight" in msg and "extra.bias" in msg
        assert "find_unused_parameters=True" in msg and "take part in the loss" in msg
        assert theirs[0] == "forward 1" and "Expected to have finished reduction" in theirs[1]


def branchy_rank(rank, world_size):
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload, call_batch

    w = build_workload("branchy")
    ddp = MinDDP(w.model)  # find_unused_parameters=False, but the branch is unused on rank 1
    for step in range(2):  # rank 1 raises at its second forward; rank 0 waits for its bucket till then
        inputs, target = call_batch(w, step, rank, world_size, 8)
        w.loss(ddp(*inputs), target).backward()
    return "finished"


@pytest.mark.slow  # real gloo ranks
def test_branch_unused_on_one_rank_fails_fast_not_hangs():
    pytest.importorskip("ddpsim.models.zoo_models")
    with pytest.raises(RankFailure) as info:
        run_ranks(branchy_rank, 2, timeout=60)  # rank 0 would wait forever in finalize
    err = info.value
    assert err.rank == 1, err
    assert "MissingGradientError" in err.error and "branch.0.weight" in err.error
    assert "find_unused_parameters=True" in err.error


def twice_rank(rank, world_size):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    x = torch.randn(4, 8)
    torch.manual_seed(0)
    mine = _where_it_fails(MinDDP(CheckpointedTwice()), x)
    torch.manual_seed(0)
    theirs = _where_it_fails(nn.parallel.DistributedDataParallel(CheckpointedTwice()), x)
    return mine, theirs


@pytest.mark.slow  # real gloo ranks
def test_marked_ready_twice_names_the_parameter():
    for mine, theirs in run_ranks(twice_rank, 2, timeout=60):
        assert theirs[0] == "backward 0" and "mark a variable ready only once" in theirs[1]
        assert mine[0] == "backward 0", mine
        assert "marked ready twice" in mine[1] and "shared." in mine[1], mine


class LateBranch(nn.Module):
    """``b`` takes part from the second forward on: a graph that static_graph promised would not change."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.calls = nn.Linear(4, 2), nn.Linear(4, 2), 0

    def forward(self, x):
        self.calls += 1
        return self.a(x) + self.b(x) if self.calls > 1 else self.a(x)


class SplitHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.t, self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x):
        h = self.t(x)
        return self.a(h), self.b(h)


def _first_error(rank, world_size, case):
    """Three steps of ``case`` on torch's DDP, then on minddp: (step, first line) of each one's error."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    out = {}
    for impl, cls in (("torch", nn.parallel.DistributedDataParallel), ("minddp", MinDDP)):
        torch.manual_seed(0)
        model = LateBranch() if case == "static graph changed" else SplitHeads()
        ddp = cls(model, static_graph=True) if case == "static graph changed" else cls(model, find_unused_parameters=True)
        out[impl] = None
        try:
            for step in range(3):
                model.zero_grad(set_to_none=True)
                y = ddp(torch.full((2, 4), float(rank + 1)))
                if case == "static graph changed":
                    y.sum().backward()
                else:  # the synced pass leaves b undefined; a second, local pass marks b used
                    y[0].sum().backward(retain_graph=True)
                    y[1].sum().backward()
        except RuntimeError as e:
            out[impl] = (step, str(e).splitlines()[0])
    return out


@pytest.mark.slow  # real gloo ranks
@pytest.mark.parametrize("case, said", [
    ("static graph changed", "Your training graph has changed in this iteration"),
    ("used, yet undefined", "Encountered gradient which is undefined, but still allreduced by DDP reducer"),
])
def test_reducer_checks_raise_where_torchs_do(case, said):
    """reducer.cpp's REDUCER_CHECKs, mirrored: minddp trained through both (in the first, with b's
    gradient never averaged across ranks)."""
    for out in run_ranks(_first_error, 2, args=(case,), timeout=60):
        assert out["torch"] is not None and said in out["torch"][1], out
        assert out["minddp"] == out["torch"], out


def create_graph_rank(rank, world_size):
    """The first backward with ``create_graph=True`` on torch's DDP, then on minddp: its error."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    out = []
    for cls in (nn.parallel.DistributedDataParallel, MinDDP):
        torch.manual_seed(0)
        ddp = cls(nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)))
        try:
            ddp(torch.randn(3, 4)).pow(2).sum().backward(create_graph=True)
            out.append("trained")
        except RuntimeError as e:
            out.append(str(e).splitlines()[0])
    return out


@pytest.mark.slow  # real gloo ranks
def test_create_graph_fails_as_torchs_does():
    """A gradient that requires grad (create_graph=True) is divided by at::mul, then copied into its bucket
    view, as reducer.cpp does, and fails where torch's does; minddp's mul_out raised an error of its own."""
    for theirs, mine in run_ranks(create_graph_rank, 2, timeout=60):
        assert theirs == mine == "a leaf Variable that requires grad is being used in an in-place operation.", (theirs, mine)
