"""The DDP methods training code calls after construction, minddp against torch 2.13's DDP on 3 real
gloo ranks (one spawn): ``_register_builtin_comm_hook``, ``_set_static_graph``,
``_remove_autograd_hooks``, ``_check_reducer_finalized`` and ``_get_ddp_logging_data``
(ddpsim/minddp/ddp_methods.py, builtin_hooks.py, logging_data.py)."""
import warnings

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddpsim import torchcompat
from distutil import run_ranks

IMPLS = ("torch", "minddp")
BUILTIN = {"ALLREDUCE": "allreduce_hook", "FP16_COMPRESS": "fp16_compress_hook"}
OPTIONS = {"one bucket": {}, "several buckets": dict(bucket_cap_mb=0.0002),
           "gradient_as_bucket_view": dict(gradient_as_bucket_view=True)}
LOGGING_OPTIONS = {"default": {}, "find_unused": dict(find_unused_parameters=True),
                   "static_graph": dict(static_graph=True), "caps": dict(bucket_cap_mb=0.0002),
                   "caps, find_unused, views": dict(bucket_cap_mb=0.0002, find_unused_parameters=True,
                                                    gradient_as_bucket_view=True)}
KNOWN = {"backend_name", "bucket_cap_bytes", "bucket_sizes", "dtypes", "find_unused_parameters", "gradient_as_bucket_view",
         "num_parameter_tensors", "rank", "total_parameter_size_bytes", "world_size", "module_name", "iteration"}


class Branches(nn.Module):
    """Three Linears; ``c`` takes part only when ``use_c``."""

    def __init__(self, use_c=True):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.c, self.use_c = nn.Linear(4, 13), nn.Linear(13, 2), nn.Linear(4, 2), use_c

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        return y + self.c(x) if self.use_c else y


def _ddp(impl, model, **options):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    return cls(model, **options)


def _outcome(call):
    """("ok", warnings) or (error type, message); the type is the builtin one (minddp's
    MissingGradientError is a RuntimeError, as torch's error is)."""
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            call()
        return "ok", [(w.category.__name__, str(w.message)) for w in seen]
    except Exception as e:  # noqa: BLE001 - the outcome is what is compared
        return next(c.__name__ for c in type(e).__mro__ if c.__module__ == "builtins"), str(e)


def _steps(rank, ddp, n, first=0, lr=0.1):
    """``n`` SGD steps on this rank's data; each step's outcome and gradients."""
    opt = torch.optim.SGD(ddp.module.parameters(), lr=lr)
    out = []
    for step in range(first, first + n):
        torch.manual_seed(100 + 10 * rank + step)
        x = torch.randn(3, 4)
        opt.zero_grad(set_to_none=True)
        done = _outcome(lambda: ddp(x).pow(2).sum().backward())
        out.append((done, [None if p.grad is None else p.grad.flatten().tolist() for p in ddp.module.parameters()]))
        opt.step()
    return out


def _failure(outcome):
    """What failed, in torch's words for it (minddp words some of these errors its own way, with torch's inside)."""
    kind, said = outcome
    for words in ("Expected a proper Tensor but got None", "ready only once", "!unmarked_param_indices.empty()"):
        if words in str(said):
            return kind, words
    return outcome


def _call(method, ddp):
    """``_outcome`` of one of torchcompat's calls of a private DDP method, on ``ddp`` (torch's or minddp's)."""
    return _outcome(lambda: method(ddp))


def _register(kind):
    """Register a hook by name: a builtin type or torch's Python hook of ``default_hooks``."""
    if kind in BUILTIN:
        return lambda d: torchcompat.register_builtin_comm_hook(d, kind)
    return lambda d: d.register_comm_hook(None, getattr(default_hooks, kind))


def _hooks(rank, impl):
    kinds = [None, *BUILTIN, *BUILTIN.values()]
    grads = {(kind, name): _train_with(rank, impl, kind, opts) for kind in kinds for name, opts in OPTIONS.items()}
    twice = {}
    for first in ("ALLREDUCE", "FP16_COMPRESS", "allreduce_hook"):
        for second in ("ALLREDUCE", "FP16_COMPRESS", "allreduce_hook"):
            ddp = _ddp(impl, Branches())
            _register(first)(ddp)
            twice[first, second] = _outcome(lambda: _register(second)(ddp)), \
                torchcompat.ddp_logging_data(ddp)["comm_hook"]
    ddp = _ddp(impl, Branches())
    late = _steps(rank, ddp, 1) + [_outcome(lambda: _register("FP16_COMPRESS")(ddp))] + _steps(rank, ddp, 2, 1)
    return grads, twice, late


def _train_with(rank, impl, kind, options):
    ddp = _ddp(impl, Branches(), **options)
    if kind is not None:
        _register(kind)(ddp)
    return _steps(rank, ddp, 3)


def _static_graph(rank, impl):
    out = {}
    for find_unused in (False, True):
        ddp = _ddp(impl, Branches(use_c=False), find_unused_parameters=find_unused)
        out["set", find_unused] = [_call(torchcompat.set_static_graph, ddp), _call(torchcompat.set_static_graph, ddp)]
        out["steps", find_unused] = _steps(rank, ddp, 3)
        out["constructor", find_unused] = _steps(rank, _ddp(impl, Branches(use_c=False), static_graph=True,
                                                            find_unused_parameters=find_unused), 3)
        ddp = _ddp(impl, Branches(), find_unused_parameters=find_unused)
        out["late", find_unused] = _steps(rank, ddp, 2) + [_call(torchcompat.set_static_graph, ddp), ddp.static_graph] \
            + [_failure(done) for done, _ in _steps(rank, ddp, 3, 2)]
    ddp = _ddp(impl, Branches())
    with torch.no_grad():
        ddp(torch.ones(1, 4))
    out["after a no_grad forward"] = _call(torchcompat.set_static_graph, ddp)
    return out


def _removed_hooks(rank, impl):
    out = {}
    for name, options in {"default": {}, "find_unused": dict(find_unused_parameters=True),
                          "static_graph": dict(static_graph=True)}.items():
        model = Branches(use_c=not options)
        ddp = _ddp(impl, model, **options)
        out[name] = [_call(torchcompat.remove_autograd_hooks, ddp), _call(torchcompat.remove_autograd_hooks, ddp)] + \
            _steps(rank, ddp, 3) + [_call(torchcompat.check_reducer_finalized, ddp)]
        ddp = _ddp(impl, Branches(use_c=not options), **options)
        out[name, "after a step"] = _steps(rank, ddp, 1) + [_call(torchcompat.remove_autograd_hooks, ddp)] + _steps(rank, ddp, 2, 1)
    out["local"] = _steps(rank, _Local(Branches()), 3)
    out["local, c unused"] = _steps(rank, _Local(Branches(use_c=False)), 3)
    return out


class _Local(nn.Module):
    """A model without DDP, with DDP's ``.module``: each rank's own gradients."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return self.module(x)


def _finalized(rank, impl):
    ddp = _ddp(impl, Branches())
    out = [_call(torchcompat.check_reducer_finalized, ddp)]
    ddp(torch.ones(2, 4)).sum().backward()
    out.append(_call(torchcompat.check_reducer_finalized, ddp))
    ddp(torch.ones(2, 4))
    out.append(_call(torchcompat.check_reducer_finalized, ddp))
    ddp = _ddp(impl, Branches(use_c=False))
    ddp(torch.ones(2, 4)).sum().backward()
    out += [_call(torchcompat.check_reducer_finalized, ddp), _call(torchcompat.check_reducer_finalized, ddp)]
    return out


def _logging(rank, impl):
    out = {}
    for name, options in LOGGING_OPTIONS.items():
        ddp = _ddp(impl, Branches(), **options)
        seen = [torchcompat.ddp_logging_data(ddp)]
        for step in range(3):
            _steps(rank, ddp, 1, step)
            seen.append(torchcompat.ddp_logging_data(ddp))
        out[name] = seen
    ddp = _ddp(impl, Branches())
    torchcompat.set_static_graph(ddp)
    torchcompat.register_builtin_comm_hook(ddp, "FP16_COMPRESS")
    _steps(rank, ddp, 2)
    with ddp.join():
        _steps(rank, ddp, 1, 2)
    out["_set_static_graph, FP16_COMPRESS, join"] = [torchcompat.ddp_logging_data(ddp)]
    mixed = nn.Sequential(nn.Linear(2, 2).double(), nn.Linear(2, 2).to(torch.bfloat16), nn.Linear(2, 2).half(), nn.Linear(2, 2))
    out["four dtypes"] = [torchcompat.ddp_logging_data(_ddp(impl, mixed))]
    return out


CASES = {"hooks": _hooks, "static_graph": _static_graph, "removed": _removed_hooks, "finalized": _finalized,
         "logging": _logging}


def _every_case(rank, world):
    torch.set_num_threads(1)
    return {(case, impl): fn(rank, impl) for case, fn in CASES.items() for impl in IMPLS}


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_every_case, 3, timeout=600)


def _same(ranks, case):
    for out in ranks:
        assert out[case, "minddp"] == out[case, "torch"]
    return [out[case, "torch"] for out in ranks]


@pytest.mark.slow
def test_builtin_hooks_train_as_torch_and_as_their_python_twins(ranks):
    """Note [Builtin hooks are the Python hooks in C++] in ddpsim/minddp/builtin_hooks.py."""
    for grads, twice, late in _same(ranks, "hooks"):
        for name in OPTIONS:
            for builtin, python in BUILTIN.items():
                assert grads[builtin, name] == grads[python, name]
            assert all(step[0] == ("ok", []) for step in grads["ALLREDUCE", name])
        assert grads["ALLREDUCE", "one bucket"] != grads[None, "one bucket"]  # divide by 3 vs multiply by 1/3
        for (first, second), (outcome, logged) in twice.items():
            words = "register_comm_hook or register_builtin_comm_hook" if second.endswith("hook") \
                else "register_builtin_comm_hook or register_comm_hook"
            assert outcome == ("RuntimeError", f"{words} can only be called once.")
            assert logged == (second if second.endswith("hook") else f"BuiltinCommHookType.{second}")
        assert late[1] == ("ok", []) and [s[0] for s in late[::2]] == [("ok", [])] * 2


@pytest.mark.slow
def test_set_static_graph_after_construction_is_the_constructors_static_graph(ranks):
    again = ("UserWarning", "You've set static_graph to be True, no need to set it again.")
    late = ("RuntimeError", "set_static_graph() should be called before training loop starts and after "
                            "DistributedDataParallel is constructed.")
    for out in _same(ranks, "static_graph"):
        for find_unused in (False, True):
            first, second = out["set", find_unused]
            assert first[0] == "ok" and len(first[1]) == int(find_unused) and second == ("ok", [again])
            assert out["steps", find_unused] == out["constructor", find_unused]
            assert out["late", find_unused][2:4] == [late, True]  # ddp.static_graph is True all the same
            # Note [A late _set_static_graph]: the next backward fails, and every forward after it
            first = "ready only once" if find_unused else "Expected a proper Tensor but got None"
            assert out["late", find_unused][4:] == [("RuntimeError", first)] + \
                [("RuntimeError", "!unmarked_param_indices.empty()")] * 2
        assert out["after a no_grad forward"] == ("ok", [])


@pytest.mark.slow
def test_removed_autograd_hooks_leave_each_ranks_own_gradients(ranks):
    outs = _same(ranks, "removed")
    for out in outs:
        for name in ("default", "find_unused", "static_graph"):
            local = out["local" if name == "default" else "local, c unused"]
            assert out[name][:2] == [("ok", [])] * 2 and out[name][-1] == ("ok", [])
            assert out[name][2:5] == local  # from the first step
    for name in ("default", "find_unused", "static_graph"):  # after a synced step: no allreduce either
        later = [out[name, "after a step"][2:] for out in outs]
        assert all(step[0] == ("ok", []) for steps in later for step in steps)
        assert later[0] != later[1] != later[2]


@pytest.mark.slow
def test_check_reducer_finalized_raises_where_the_next_forward_would(ranks):
    for out in ranks:
        for impl in IMPLS:
            said = out["finalized", impl]
            assert said[:3] == [("ok", [])] * 3
            for kind, message in said[3:]:
                assert kind == "RuntimeError"
                assert "Expected to have finished reduction in the prior iteration before starting a new one" in message


@pytest.mark.slow
@pytest.mark.parametrize("name", [*LOGGING_OPTIONS, "_set_static_graph, FP16_COMPRESS, join", "four dtypes"])
def test_logging_data_has_torchs_values(ranks, name):
    for out in ranks:
        for theirs, ours in zip(out["logging", "torch"][name], out["logging", "minddp"][name], strict=True):
            assert set(ours) == set(theirs)  # Note [What the logging data holds] in ddpsim/minddp/logging_data.py
            # the timing keys measure each process: tests/test_minddp_logging_timing.py
            timed = {k for k in ours if k.endswith("_time") or "_time_" in k}
            assert {k: theirs[k] for k in ours if k not in timed} == {k: ours[k] for k in ours if k not in timed}
        ours = out["logging", "minddp"][name][-1]
        assert KNOWN <= set(ours)
        if name in ("default", "caps"):  # rebuilt at the second forward, logged at the third
            assert ours["has_rebuilt_buckets"] == 1 and "rebuilt_per_bucket_param_indices" in ours
