"""The optimizer run in the backward (torch 2.13): ``_apply_optimizer_in_backward`` before DDP and
``DistributedDataParallel._register_fused_optim``, minddp against torch's DDP on 2 real gloo ranks
without an accelerator (ddpsim/minddp/optimizer_in_backward.py). Every case runs 3 steps; after
each we compare, bit for bit, the ``.grad`` of every parameter after the backward, the parameters
after the step, and the error of each stage (type and message)."""
import json
import re

import pytest
import torch
from torch import nn

from distutil import run_ranks

SGD = (torch.optim.SGD, {"lr": 0.1})
ADAM = (torch.optim.Adam, {"lr": 0.01})
HOOK = "allreduce_hook"
# name -> settings: "opt" (optimizer, kwargs), "how" ("plain": opt.step() after backward,
# "in_backward": _apply_optimizer_in_backward before DDP, "in_backward_after": after DDP but before the
# first forward, "fused": _register_fused_optim), "ddp" (options), "subset" (only the first layer's
# parameters), "no_sync" (the first step under no_sync), "hook" (before or after the optimizer's setup),
# "unused" (the model's third layer takes no part), "ignored" (a.weight left to each rank by
# _set_params_and_buffers_to_ignore_for_model, and the only parameter given the optimizer in the backward)
CASES = {
    "plain sgd": dict(opt=SGD, how="plain"),
    "plain adam": dict(opt=ADAM, how="plain"),
    "in_backward sgd": dict(opt=SGD, how="in_backward"),
    "in_backward adam": dict(opt=ADAM, how="in_backward"),
    "in_backward sgd, after DDP": dict(opt=SGD, how="in_backward_after"),
    "in_backward sgd, subset": dict(opt=SGD, how="in_backward", subset=True),
    "in_backward sgd, an ignored parameter": dict(opt=SGD, how="in_backward", ignored=True),
    "in_backward sgd, find_unused_parameters": dict(opt=SGD, how="in_backward", unused=True,
                                                    ddp=dict(find_unused_parameters=True)),
    "in_backward sgd, gradient_as_bucket_view": dict(opt=SGD, how="in_backward",
                                                     ddp=dict(gradient_as_bucket_view=True)),
    "in_backward sgd, no_sync": dict(opt=SGD, how="in_backward", no_sync=True),
    "in_backward sgd, comm hook first": dict(opt=SGD, how="in_backward", hook="before"),
    "plain sgd, no_sync": dict(opt=SGD, how="plain", no_sync=True),
    "fused sgd": dict(opt=SGD, how="fused"),
    "fused adam": dict(opt=ADAM, how="fused"),
    "fused sgd, optim_params": dict(opt=SGD, how="fused", subset=True),
    "fused sgd, find_unused_parameters": dict(opt=SGD, how="fused", unused=True, ddp=dict(find_unused_parameters=True)),
    "fused sgd, gradient_as_bucket_view": dict(opt=SGD, how="fused", ddp=dict(gradient_as_bucket_view=True)),
    "fused sgd, no_sync": dict(opt=SGD, how="fused", no_sync=True),
    "fused sgd, twice": dict(opt=SGD, how="fused", twice=True),
    "fused sgd, comm hook first": dict(opt=SGD, how="fused", hook="before"),
    "fused sgd, comm hook after": dict(opt=SGD, how="fused", hook="after"),
    "fused lbfgs": dict(opt=(torch.optim.LBFGS, {"lr": 0.1}), how="fused"),
}


class Net(nn.Module):
    """Two Linears (the same on every rank: seed 0) and a third, used only with ``unused=False``."""

    def __init__(self, unused):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c = nn.Linear(4, 3), nn.Linear(3, 2), nn.Linear(2, 2)
        self.unused = unused

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return y if self.unused else self.c(y)


def _error(fn):
    """'Type: message' of what ``fn()`` raised, or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return f"{type(e).__name__}: {e}"
    return None


def _grads(model):
    return [None if p.grad is None else p.grad.flatten().tolist() for p in model.parameters()]


def _params(model):
    return [p.detach().flatten().tolist() for p in model.parameters()]


def _setup(impl, case):
    """(model, ddp, plain optimizer or None, {stage: error}) for one case."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    model, errors = Net(case.get("unused", False)), {}
    (opt_cls, kwargs), how = case["opt"], case["how"]
    chosen = list(model.a.parameters()) if case.get("subset") else list(model.parameters())
    if case.get("ignored"):
        torchcompat.set_ddp_params_and_buffers_to_ignore(model, ["a.weight"])
        chosen = [model.a.weight]
    if how == "in_backward":
        torchcompat.apply_optimizer_in_backward(opt_cls, chosen, kwargs)
    ddp = cls(model, **case.get("ddp", {}))
    if case.get("hook") == "before":
        ddp.register_comm_hook(None, allreduce_hook)
    if how == "in_backward_after":
        torchcompat.apply_optimizer_in_backward(opt_cls, chosen, kwargs)
    if how == "fused":
        params = chosen if case.get("subset") else None
        errors["fused"] = _error(lambda: torchcompat.register_fused_optim(ddp, opt_cls, optim_params=params, **kwargs))
        if case.get("twice"):
            errors["fused twice"] = _error(lambda: torchcompat.register_fused_optim(ddp, opt_cls, **kwargs))
    if case.get("hook") == "after":
        errors["hook after"] = _error(lambda: ddp.register_comm_hook(None, allreduce_hook))
    plain = opt_cls(model.parameters(), **kwargs) if how == "plain" else None
    return model, ddp, plain, errors


def _one_case(rank, impl, case):
    """Errors and warnings of the setup, the parameters after it, then per step: the forward's and
    backward's errors, ``.grad`` after the backward, the parameters after the step (``plain``:
    ``opt.step(); opt.zero_grad()``; ``fused``: ``model.zero_grad()``; neither under no_sync)."""
    import contextlib

    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, ddp, plain, errors = _setup(impl, case)
    warned = sorted({(w.category.__name__, str(w.message)) for w in caught})
    steps, initial = [], _params(model)
    for step in range(3):
        torch.manual_seed(100 * step + rank)
        x = torch.randn(5, 4)
        ctx = ddp.no_sync() if case.get("no_sync") and step == 0 else contextlib.nullcontext()
        out, row = [], {}
        with ctx:
            row["forward"] = _error(lambda: out.append(ddp(x)))
            if out:
                row["backward"] = _error(lambda: out[0].square().sum().backward())
        row["grads"] = _grads(model)
        if plain is not None and not (case.get("no_sync") and step == 0):
            plain.step()
            plain.zero_grad()
        if case["how"] == "fused" and not (case.get("no_sync") and step == 0):
            model.zero_grad()  # the fused optimizer has stepped; .grad is the user's to clear
        row["params"] = _params(model)
        steps.append(row)
    return {"errors": errors, "warnings": warned, "initial": initial, "steps": steps}


def _all_cases(rank, world, impls, names):
    """{impl: {case: result}} for each implementation, all cases in one spawn. The modules behind
    both APIs warn once, when first imported (TorchScript deprecations): imported first, silently."""
    import importlib
    import warnings

    torch.set_num_threads(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        importlib.import_module("torch.distributed.algorithms._optimizer_overlap")
    out = {impl: {name: _one_case(rank, impl, CASES[name]) for name in names} for impl in impls}
    return {**out, "torch.Stream()": _error(torch.Stream)}  # the oracle of where torch stops (Note [The optimizer ...])


@pytest.fixture(scope="module")
def results():
    """{impl: {case: result}} per rank: every case on torch's DDP, then on minddp, in one spawn."""
    return run_ranks(_all_cases, world_size=2, args=(["torch", "minddp"], list(CASES)), timeout=300)


def _located(result):
    """``result`` with each internal assert's location replaced: torch's names the file and line of
    its build, minddp's the function (messages.NO_UNMARKED_PARAMS); the rest is compared as it is."""
    text = re.sub(r"INTERNAL ASSERT FAILED at .*?, please", "INTERNAL ASSERT FAILED at <where>, please",
                  json.dumps(result))
    return json.loads(text)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_minddp_does_what_torch_does(results, name):
    """Errors (type and message), warnings, ``.grad`` and parameters after each step, bit for bit."""
    for rank, per_impl in enumerate(results):
        assert _located(per_impl["minddp"][name]) == _located(per_impl["torch"][name]), f"rank {rank}: {name}"


NO_ACCELERATOR = "RuntimeError: Cannot access accelerator device when none is available."
UNFINALIZED = "RuntimeError: !unmarked_param_indices.empty() INTERNAL ASSERT FAILED at "
ONCE = "RuntimeError: register_comm_hook or register_builtin_comm_hook can only be called once."


@pytest.mark.slow
def test_torch_apply_optimizer_in_backward_stops_without_an_accelerator(results):
    """What the doc says torch does (Note [The optimizer in the backward needs an accelerator]): a CPU
    build stops at the end of the first synced backward, a CUDA build with no usable GPU at every
    forward, with the error of ``torch.Stream()``; a parameter DDP ignores trains on either."""
    for per_impl in results:
        r, stream = per_impl["torch"], per_impl["torch.Stream()"]
        if stream is None:
            _stops_after_the_first_backward(r)
        else:
            _stops_at_every_forward(r, stream)
        ignored = r["in_backward sgd, an ignored parameter"]  # its own hook steps it; DDP reduces the rest
        assert all(s["forward"] is None and s["backward"] is None for s in ignored["steps"])
        assert ignored["steps"][-1]["params"][0] != ignored["initial"][0]
        assert all(s["params"][1:] == ignored["initial"][1:] for s in ignored["steps"])


def _stops_at_every_forward(r, stream):
    """A CUDA build: the first forward's ``_lazy_init`` makes the hook's ``torch.Stream()`` before it
    registers the hook, and fails there at every forward; nothing is stepped, no ``.grad`` written."""
    assert stream.startswith(("AcceleratorError: ", "RuntimeError: ")), stream
    for name in (n for n, case in CASES.items() if case["how"].startswith("in_backward") and not case.get("ignored")):
        for s in r[name]["steps"]:
            assert s["forward"] == stream and "backward" not in s, name
            assert s["params"] == r[name]["initial"] and s["grads"] == [None] * len(s["grads"]), name


def _stops_after_the_first_backward(r):
    """A CPU build: the callback's ``torch.accelerator.current_stream()`` fails after every optimizer stepped."""
    for name in ("in_backward sgd", "in_backward adam", "in_backward sgd, after DDP",
                 "in_backward sgd, gradient_as_bucket_view", "in_backward sgd, find_unused_parameters"):
        steps, plain = r[name]["steps"], r["plain " + name.split()[1].rstrip(",")]["steps"]
        assert steps[0]["backward"] == NO_ACCELERATOR, name
        if "find_unused" not in name:  # the first step is a plain step's, bit for bit, .grad included
            assert (steps[0]["params"], steps[0]["grads"]) == (plain[0]["params"], plain[0]["grads"]), name
        if "find_unused" in name:  # the unused layer's bucket slice is zeros: SGD leaves it
            assert steps[0]["params"][4:] == r[name]["initial"][4:]
        for later in steps[1:]:  # no forward again: nothing moves
            assert later["forward"].startswith(UNFINALIZED) and later["params"] == steps[0]["params"], name
    subset, plain = r["in_backward sgd, subset"], r["plain sgd"]["steps"]
    assert subset["steps"][0]["params"][:2] == plain[0]["params"][:2]
    assert subset["steps"][0]["params"][2:] == subset["initial"][2:]  # no optimizer: not stepped
    assert subset["steps"][0]["grads"][:2] == plain[0]["grads"][:2]
    assert subset["steps"][0]["grads"][2:] != plain[0]["grads"][2:]  # local: never averaged
    no_sync, plain = r["in_backward sgd, no_sync"]["steps"], r["plain sgd, no_sync"]["steps"]
    assert no_sync[0]["backward"] is None and no_sync[0]["params"] == r["in_backward sgd, no_sync"]["initial"]
    assert no_sync[0]["grads"] == plain[0]["grads"]  # accumulated locally, no optimizer step
    assert no_sync[1]["backward"] == NO_ACCELERATOR and no_sync[1]["params"] == plain[1]["params"]
    first = r["in_backward sgd, comm hook first"]
    assert all(s["forward"] == ONCE and s["params"] == first["initial"] for s in first["steps"])


@pytest.mark.slow
def test_torch_fused_optim_steps_like_a_plain_step(results):
    """``_register_fused_optim``: the parameters and ``.grad`` of a plain step, bit for bit."""
    for per_impl in results:
        r = per_impl["torch"]
        for fused, plain in (("fused sgd", "plain sgd"), ("fused adam", "plain adam"),
                             ("fused sgd, gradient_as_bucket_view", "plain sgd"),
                             ("fused sgd, no_sync", "plain sgd, no_sync")):
            assert r[fused]["steps"] == r[plain]["steps"], fused
        subset = r["fused sgd, optim_params"]
        assert subset["steps"][0]["params"][:2] == r["plain sgd"]["steps"][0]["params"][:2]
        assert all(s["params"][2:] == subset["initial"][2:] for s in subset["steps"])  # not in optim_params
        unused = r["fused sgd, find_unused_parameters"]
        assert [g is None for g in unused["steps"][-1]["grads"]] == [False] * 4 + [True] * 2
        assert unused["steps"][-1]["params"][4:] == unused["initial"][4:]  # the unused layer
        assert r["fused sgd, twice"]["errors"]["fused twice"] == ONCE
        assert r["fused sgd, comm hook first"]["errors"]["fused"] == ONCE
        assert r["fused sgd, comm hook after"]["errors"]["hook after"] == ONCE
        assert r["fused lbfgs"]["errors"]["fused"] == ("ValueError: Optimizer <class 'torch.optim.lbfgs.LBFGS'> "
                                                       "does not have a functional counterpart!")
