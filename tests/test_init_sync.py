"""``init_sync`` (torch 2.13): minddp against torch's DDP on real gloo ranks: what each rank holds
after construction, and that init_sync=False checks nothing (Note [init_sync] in
ddpsim/minddp/verify.py)."""
import pytest
import torch
from torch import nn

from distutil import run_ranks
from torchgates import lacking, needs_ddp

pytestmark = needs_ddp("init_sync")  # every test here compares with torch's DDP given it

# name -> DDP options; each rank builds its model with its own seed and a buffer holding its rank
OPTIONS = {
    "default": {},
    "init_sync=True": dict(init_sync=True),
    "init_sync=False": dict(init_sync=False),
    "init_sync=False, forward_sync_buffers=True": dict(init_sync=False, forward_sync_buffers=True),
    "init_sync=True, broadcast_buffers=False": dict(init_sync=True, broadcast_buffers=False),
}


class RankModel(nn.Module):
    """A Linear initialised from the rank's seed, a buffer holding the rank, and (``extra``) a
    second Linear that makes the models differ across ranks."""

    def __init__(self, rank, extra=False):
        super().__init__()
        torch.manual_seed(rank)
        self.lin = nn.Linear(3, 2)
        self.extra = nn.Linear(2, 2) if extra else None
        self.register_buffer("b", torch.full((2,), float(rank)))

    def forward(self, x):
        y = self.lin(x) + self.b
        return self.extra(y) if self.extra is not None else y


def _ddp(impl, model, options):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        ddp = cls(model, **options)
    return ddp, sum(e.name.startswith("gloo:") for e in prof.events())


def _after_construction(rank, impl, options):
    """Parameters and buffer after construction, the gloo collectives construction issued, then
    parameters and buffer after one step (buffers are broadcast before the forward)."""
    model = RankModel(rank)
    ddp, collectives = _ddp(impl, model, options)
    state = [[p.flatten().tolist() for p in model.parameters()], model.b.tolist(), collectives > 0]
    ddp(torch.ones(1, 3)).sum().backward()
    return state + [[p.grad.flatten().tolist() for p in model.parameters()], model.b.tolist()]


def _mismatched(rank, impl, init_sync):
    """Rank 1 has one Linear more: the error construction raises, if any."""
    try:
        _ddp(impl, RankModel(rank, extra=rank == 1), dict(init_sync=init_sync))
    except RuntimeError as e:
        return str(e).split(",")[0]
    return "constructed"


def _every_case(rank, world):
    built = {(name, impl): _after_construction(rank, impl, options) for name, options in OPTIONS.items()
             if not lacking(options) for impl in ("torch", "minddp")}
    mismatched = {(init_sync, impl): _mismatched(rank, impl, init_sync)
                  for init_sync in (False, True) for impl in ("torch", "minddp")}
    return built, mismatched


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_every_case, 2, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(name, marks=needs_ddp(*options)) for name, options in OPTIONS.items()])
def test_minddp_constructs_as_torch(ranks, name):
    for built, _ in ranks:
        assert built[(name, "minddp")] == built[(name, "torch")]


@pytest.mark.slow
def test_what_init_sync_false_leaves_on_each_rank(ranks):
    """torch 2.13: no collective at construction; each rank keeps its own parameters and buffer;
    the first forward still broadcasts rank 0's buffer (forward_sync_buffers), never parameters."""
    (zero, _), (one, _) = ranks
    params, buffer, collectives, grads, buffer_after = range(5)
    off, on = "init_sync=False", "default"
    assert zero[(on, "torch")][collectives] and not zero[(off, "torch")][collectives]
    assert zero[(on, "torch")][params] == one[(on, "torch")][params]
    assert zero[(off, "torch")][params] != one[(off, "torch")][params]
    assert [zero[(off, "torch")][buffer], one[(off, "torch")][buffer]] == [[0.0, 0.0], [1.0, 1.0]]
    assert one[(off, "torch")][buffer_after] == [0.0, 0.0]
    assert zero[(off, "torch")][grads] == one[(off, "torch")][grads]  # averaged, as ever
    assert one["init_sync=True, broadcast_buffers=False", "torch"][buffer] == [1.0, 1.0]


@pytest.mark.slow
def test_init_sync_false_does_not_catch_a_mismatched_model(ranks):
    for _, mismatched in ranks:
        assert mismatched[(False, "torch")] == mismatched[(False, "minddp")] == "constructed"
        assert mismatched[(True, "torch")].startswith("DDP expects same model across all ranks")
        assert mismatched[(True, "minddp")] == mismatched[(True, "torch")]
