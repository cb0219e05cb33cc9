"""What minddp does with a forward's outputs, as torch's DDP does (real gloo ranks, torch beside it).

- It finds their tensors as torch's ``_find_tensors`` does (tensors, lists, tuples, dicts and
  dataclasses), so find_unused_parameters' graph search starts from the same outputs: a forward
  returning a dataclass made minddp mark every parameter unused and raise "marked ready twice".
- It passes them through a sink only where torch does (Note [The sink] in minddp/ddp.py): with the
  sink always there, an output left out of the loss still ran its branch backward, and a gradient
  hook that fired with no gradient was ignored, so minddp trained where torch fails and failed
  where torch trains.
"""
import dataclasses

import pytest
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


class NoGradFor(torch.autograd.Function):
    """x * s, with no gradient for s (backward returns None for it)."""

    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(s)
        return x * s

    @staticmethod
    def backward(ctx, g):
        (s,) = ctx.saved_tensors
        return g * s, None


class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * w, (g * x).sum(0)


class Scaled(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.a, self.s, self.fn = nn.Linear(4, 4), nn.Parameter(torch.ones(4)), fn

    def forward(self, x):
        h = self.a(x)
        return h, self.fn.apply(h, self.s)


def default_options(rank, world, fn_name, output):
    """Three steps with default options, the loss on ``output`` alone: per impl, the step that
    raised and the error's class (or "trained") and s's gradient."""
    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    out = {}
    for impl in ("torch", "minddp"):
        torch.manual_seed(0)
        model = Scaled({"NoGradFor": NoGradFor, "Mul": Mul}[fn_name])
        ddp = torchcompat.torch_ddp(model, True) if impl == "torch" else MinDDP(model)
        try:
            for step in range(3):
                model.zero_grad(set_to_none=True)
                ddp(torch.ones(2, 4))[output].sum().backward()
            out[impl] = ("trained", None if model.s.grad is None else model.s.grad.tolist())
        except RuntimeError as e:
            out[impl] = (f"step {step}", type(e).__name__, str(e).splitlines()[0])
    return out


def test_a_gradient_that_arrives_undefined_marks_its_parameter_ready_as_in_torch():
    out = run_ranks(default_options, 1, args=("NoGradFor", 1), timeout=120)[0]
    assert out["torch"] == out["minddp"] == ("trained", [0.0, 0.0, 0.0, 0.0]), out


def test_an_output_left_out_of_the_loss_runs_no_branch_backward_as_in_torch():
    """torch never runs the second output's branch, so s gets no gradient: both fail at the next
    forward, minddp naming s."""
    out = run_ranks(default_options, 1, args=("Mul", 0), timeout=120)[0]
    assert out["torch"][0] == "step 1" and "Expected to have finished reduction" in out["torch"][2], out
    assert out["minddp"][0] == "step 1" and "received no gradient: s (index" in out["minddp"][2], out


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.extra = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return self.a(x), self.b(x), self.extra  # a parameter returned as it is, too


def several_backwards(rank, world, how, options):
    """Three steps whose reduction spans two autograd passes: per impl, "trained" and every gradient,
    or the step and first line of the error."""
    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    out = {}
    for impl in ("torch", "minddp"):
        torch.manual_seed(0)
        model = TwoHeads()
        ddp = torchcompat.torch_ddp(model, True, **options) if impl == "torch" else MinDDP(model, **options)
        try:
            for step in range(3):
                model.zero_grad(set_to_none=True)
                x = torch.full((2, 4), float(rank + 1), requires_grad=True)
                ya, yb, extra = ddp(x)
                if how == "one head at a time":
                    ya.sum().backward()
                    (yb.sum() + extra.sum()).backward()
                else:  # "autograd.grad first": a gradient penalty's input gradient, then the loss
                    (g,) = torch.autograd.grad(ya.sum(), x, retain_graph=True)
                    (ya.sum() + yb.sum() + extra.sum() + g.sum()).backward()
            out[impl] = ("trained", [None if p.grad is None else p.grad.tolist() for p in model.parameters()])
        except RuntimeError as e:
            out[impl] = (f"step {step}", str(e).splitlines()[0])
    return out


@pytest.mark.parametrize("how", ["one head at a time", "autograd.grad first"])
@pytest.mark.parametrize("options", [{}, {"find_unused_parameters": True}], ids=["default", "find_unused"])
def test_a_reduction_over_several_autograd_passes_goes_as_in_torch(how, options):
    """minddp raised "received no gradient" at the end of the first pass, where torch trains (or,
    with find_unused and the returned parameter, fails the same way)."""
    for out in run_ranks(several_backwards, 2, args=(how, options), timeout=120):
        (mine, said), (theirs, torch_said) = out["minddp"], out["torch"]
        assert mine == theirs, out  # trained, or failed at the same step
        if theirs == "trained":
            assert said == torch_said, out  # bit for bit
        else:  # minddp's message names the parameter and quotes torch's
            assert torch_said.split(".")[0] in said, out
