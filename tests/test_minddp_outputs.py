"""minddp finds the tensors of a forward's output as torch's ``_find_tensors`` does (tensors, lists,
tuples, dicts and dataclasses), so find_unused_parameters' graph search starts from the same
outputs: a forward returning a dataclass made minddp mark every parameter unused and then raise
"marked ready twice", where torch trained. Real gloo ranks, torch's DDP beside minddp."""
import dataclasses

import torch
from torch import nn

from distutil import run_ranks


@dataclasses.dataclass
class Output:
    logits: torch.Tensor
    extra: dict


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return Output(self.a(x), {"nested": [self.a.weight.sum()]})


def train(rank, world):
    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    grads = {}
    for impl in ("torch", "minddp"):
        torch.manual_seed(0)
        model = Net()
        ddp = (torchcompat.torch_ddp(model, True, find_unused_parameters=True) if impl == "torch"
               else MinDDP(model, find_unused_parameters=True))
        for step in range(3):
            model.zero_grad(set_to_none=True)
            out = ddp(torch.full((2, 4), float(rank + step)))
            (out.logits.sum() + out.extra["nested"][0]).backward()
        grads[impl] = [None if p.grad is None else p.grad.tolist() for p in model.parameters()]  # plain lists travel
    return grads


def test_a_dataclass_output_is_searched_as_torch_searches_it():
    for rank, grads in enumerate(run_ranks(train, 2, timeout=120)):
        for mine, theirs in zip(grads["minddp"], grads["torch"]):
            assert (mine is None) == (theirs is None), rank
            assert mine == theirs, rank  # bit for bit
        assert grads["torch"][2] is None  # the unused layer's weight: no gradient on either
