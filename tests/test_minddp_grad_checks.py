"""The Reducer's checks on a ready gradient (reducer.cpp, torch 2.13: ``check_grad_layout`` in
``mark_variable_ready_dense``, and ``finalize_bucket_dense``'s bucket-view check under
gradient_as_bucket_view): minddp against torch's DDP on 2 real gloo ranks, one spawn for torch's
DDP and one for minddp's (the strides warning comes once per process), every case in each (Note
[Checks on a ready gradient] in ddpsim/minddp/grad_checks.py).

Each case runs a few steps on a fresh DDP and keeps, after every step, what it raised (type and
message), what it warned (text and category), the error keys of the logging data and the
gradients. torch's and minddp's must be equal, bit for bit; where torch trains on, the ranks must
agree, and the gradients must be those of a plain model run on both ranks' inputs, or not, as
measured (``WRONG``)."""
import re
import warnings

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddpsim import torchcompat
from distutil import run_ranks


class Chain(nn.Module):
    """Two Linears in a row: ``b``'s gradients are ready before ``a``'s."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = nn.Linear(4, 3), nn.Linear(3, 2)

    def forward(self, x):
        return self.b(self.a(x))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x).mean((2, 3))


class Plain(nn.Module):
    """The non-DDP reference: the same steps on the bare model."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)

    def register_comm_hook(self, state, hook):
        """No communication here: nothing to hook."""


def _input(model, rank, step):
    torch.manual_seed(100 * step + rank)
    return torch.randn(2, 3, 6, 6) if isinstance(model, Conv) else torch.randn(2, 4)


def _step(ddp, rank, zero=True):
    """One forward and backward; each rank's input is new at each step."""
    if zero:
        ddp.module.zero_grad(set_to_none=True)
    ddp.module.steps = getattr(ddp.module, "steps", 0) + 1
    (ddp(_input(ddp.module, rank, ddp.module.steps)) ** 2).sum().backward()


def _keep(ddp, rank):
    _step(ddp, rank, zero=False)


def _each_grad(fn):
    def step(ddp, rank):
        for p in ddp.module.parameters():
            fn(p)
    return step


def _set_data_double(p):
    p.grad.data = p.grad.data.double()


def _set_clone(p):
    p.grad = p.grad.clone()


def _set_none(p):
    p.grad = None


def _set_data_clone(p):
    p.grad.data = p.grad.data.clone()


def _hook_double(ddp, rank):
    ddp.module.a.weight.register_hook(lambda g: g.double())


def _channels_last(ddp, rank):
    ddp.module.to(memory_format=torch.channels_last)


def _transposed_grad(ddp, rank):
    w = ddp.module.a.weight
    w.grad = torch.zeros(w.shape[::-1]).t()  # strides (1, 3), the parameter's (4, 1)


def _clone_b_when_a_ready(ddp, rank):
    """``a``'s gradient comes last: its hook replaces ``b.weight``'s, already in its bucket."""
    b = ddp.module.b.weight
    ddp.module.a.weight.register_post_accumulate_grad_hook(lambda p: setattr(b, "grad", b.grad.clone()))


def _new_tensor_hook(state, bucket):
    """An allreduce whose future holds a new tensor (torch's ``allreduce_hook`` returns the bucket's)."""
    return default_hooks.allreduce_hook(state, bucket).then(lambda fut: fut.value().clone())


def _channels_last_new_tensor_hook(ddp, rank):
    ddp.register_comm_hook(None, _new_tensor_hook)
    _channels_last(ddp, rank)


def _grow_grad(ddp, rank):
    w = ddp.module.b.bias
    w.grad.data = torch.zeros(2, *w.shape)


# name: (model, DDP options, steps); a step is f(ddp, rank), every rank does the same. The order
# matters: the strides warning comes once per process (TORCH_WARN_ONCE), in the first case that has it.
CASES = {
    # check_grad_layout's dtype REDUCER_CHECK
    "hook returns float64": (Chain, {}, [_hook_double, _step]),
    "grad.data float64 between steps": (Chain, {}, [_step, _each_grad(_set_data_double), _keep]),
    "grad.data float64 between steps, bucket view": (Chain, dict(gradient_as_bucket_view=True),
                                                     [_step, _step, _each_grad(_set_data_double), _keep]),
    # check_grad_layout's strides warning
    "channels_last after construction, bucket view": (Conv, dict(gradient_as_bucket_view=True),
                                                      [_channels_last, _step, _step]),
    "channels_last after construction": (Conv, {}, [_channels_last, _step, _step]),
    "transposed grad": (Chain, {}, [_transposed_grad, _keep, _keep]),
    "channels_last after construction, hook's new tensor": (Conv, {}, [_channels_last_new_tensor_hook, _step, _step]),
    "channels_last after construction, hook's new tensor, bucket view": (
        Conv, dict(gradient_as_bucket_view=True), [_channels_last_new_tensor_hook, _step, _step]),
    # check_grad_layout's internal asserts
    "grad.data of another size": (Chain, {}, [_step, _grow_grad, _keep]),
    # finalize_bucket_dense's bucket-view REDUCER_CHECK
    "grad replaced in backward, bucket view": (Chain, dict(gradient_as_bucket_view=True),
                                               [_clone_b_when_a_ready, _step, _step]),
    "grad replaced in backward": (Chain, {}, [_clone_b_when_a_ready, _step, _step]),
    "grad cloned between steps, bucket view": (Chain, dict(gradient_as_bucket_view=True),
                                               [_step, _step, _each_grad(_set_clone), _keep, _keep]),
    "grad None between steps, bucket view": (Chain, dict(gradient_as_bucket_view=True),
                                             [_step, _step, _each_grad(_set_none), _keep, _keep]),
    "grad.data cloned between steps, bucket view": (Chain, dict(gradient_as_bucket_view=True),
                                                    [_step, _step, _each_grad(_set_data_clone), _keep, _keep]),
}
# the steps after which torch's gradients are not the plain model's (where torch trains on, the ranks'
# agree): ``.data =`` on a ``.grad`` that is the bucket view gives the view new memory, and the bucket
# allreduces its stale flat buffer; after ``to(memory_format=...)``, gradients go into the construction
# buckets with the old strides and come out with the new ones, until the rebuild at the second forward
WRONG = {"grad.data float64 between steps, bucket view": {3}, "grad.data cloned between steps, bucket view": {3, 4},
         "channels_last after construction": {1}, "channels_last after construction, hook's new tensor": {1},
         "channels_last after construction, hook's new tensor, bucket view": {1}}
# the test of each check: its cases
CHECKS = {"dtype": list(CASES)[:3], "strides": list(CASES)[3:8], "internal asserts": list(CASES)[8:9],
          "bucket view": list(CASES)[9:]}
# torch's C++ messages name its build's file and line, minddp's the function: both compare as "<where>"
WHERE = re.compile(r"INTERNAL ASSERT FAILED at .*?, please| \(Triggered internally at .*\)$", re.S)


def _plain(text: str) -> str:
    return WHERE.sub(lambda m: "INTERNAL ASSERT FAILED at <where>, please" if m.group().startswith("INTERNAL")
                     else "", text)


def _grads(module):
    return [None if p.grad is None else (str(p.grad.dtype), p.grad.stride(), p.grad.tolist())
            for p in module.parameters()]


def _run(wrap, name, rank):
    """The steps of case ``name`` on a fresh model wrapped by ``wrap``: what each step did."""
    make, options, steps = CASES[name]
    ddp = wrap(make(), **options)
    seen = []
    for step in steps:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                step(ddp, rank)
                outcome = "ok"
            except Exception as e:  # noqa: BLE001 - the outcome is what is compared
                outcome = (type(e).__name__, _plain(str(e)))
        data = torchcompat.ddp_logging_data(ddp) or {}
        seen.append({"outcome": outcome, "warnings": [(_plain(str(w.message)), w.category.__name__) for w in caught],
                     "error": (data.get("has_error"), data.get("error")), "grads": _grads(ddp.module)})
    return seen


def _reference(name):
    """The plain model's gradients after each of the same steps, averaged over both ranks' inputs."""
    runs = [_run(lambda m, **o: Plain(m), name, r) for r in range(2)]
    return [None if a["outcome"] != "ok" or b["outcome"] != "ok" else
            [None if x is None else torch.tensor(x[2], dtype=torch.float64).add(torch.tensor(y[2], dtype=torch.float64))
             .div(2).tolist() for x, y in zip(a["grads"], b["grads"])] for a, b in zip(*runs)]


def checks_rank(rank, world, impl):
    """Every case on ``impl``'s DDP (each in its own processes: Note [Checks on a ready gradient]'s
    warning is once per process); with torch's, the plain model's reference too."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    cls = nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    out = {name: _run(cls, name, rank) for name in CASES}
    if impl == "torch":
        out.update({("reference", name): _reference(name) for name in CASES})
    return out


@pytest.fixture(scope="module")
def ranks():
    """impl -> the ranks' results."""
    return {impl: run_ranks(checks_rank, 2, args=(impl,), timeout=240) for impl in ("torch", "minddp")}


def _matches(grads, reference) -> bool:
    """Whether the gradients are the plain model's, to float32 rounding."""
    if [g is None for g in grads] != [r is None for r in reference]:
        return False
    return all(g is None or torch.allclose(torch.tensor(g[2], dtype=torch.float64), torch.tensor(r, dtype=torch.float64), atol=1e-6)
               for g, r in zip(grads, reference))


@pytest.mark.slow  # real gloo ranks
@pytest.mark.parametrize("check", list(CHECKS))
def test_grad_checks_as_torchs(ranks, check):
    """Step by step, minddp raises, warns, logs and leaves the gradients as torch does; where torch
    trains on, the ranks' gradients agree after each step, and are the plain model's or not (``WRONG``)."""
    for name in CHECKS[check]:
        for rank in range(2):
            assert ranks["minddp"][rank][name] == ranks["torch"][rank][name], f"{name}, rank {rank}"
        reference = ranks["torch"][0][("reference", name)]
        for i, step in enumerate(ranks["torch"][0][name]):
            if step["outcome"] == "ok":
                assert ranks["torch"][1][name][i]["grads"] == step["grads"], (name, i)
                assert _matches(step["grads"], reference[i]) == (i not in WRONG.get(name, ())), (name, i)
