"""Parameters DDP does not manage (torch 2.13): the names ``_set_params_and_buffers_to_ignore_for_model``
stores on the module, and ``delay_all_reduce_named_params`` with ``param_to_hook_all_reduce``. minddp
against torch's DDP on 2 real gloo ranks, each rank with its own seed and inputs, bit for bit
(Note [Names DDP ignores] in ddpsim/minddp/construction.py, Note [Delayed allreduce] and
Note [All parameters delayed] in ddpsim/minddp/delayed.py)."""
import pytest
import torch
import torch.distributed as dist
from torch import nn

from distutil import run_ranks
from torchgates import HAS_CAPACITY_CONFIG, needs_capacity_config

IMPLS = ("torch", "minddp")
IGNORED = ["a.weight", "w", "own"]  # a submodule's parameter, a root parameter, a buffer
DELAYED = ["b.weight", "b.bias"]  # the last layer: its gradients are accumulated before a.weight's hook fires
PLAN = "nzan"  # per step: n = zero_grad(set_to_none=True), z = zero_grad(set_to_none=False), a = accumulate
ALL_DELAYED = [(True, False), (False, False), (True, True)]  # (a frozen Linear, a root parameter)
CAPS = {"default": {}, "0.5 MiB": dict(bucket_cap_mb=0.5), "list": dict(bucket_cap_mb_list=[1.5, 2.5])}  # whole MiB
# to the delayed broadcast: 25, 0 and 2 (torch's bucket_cap_mb property). A torch without
# _BucketCapacityConfig (2.11) hands the delayed broadcast 0.5 or 2.5 itself, which
# dist._broadcast_coalesced refuses (it takes an integer): those two cases need a torch with it.
RUNNABLE = [caps for caps in CAPS if caps == "default" or HAS_CAPACITY_CONFIG]  # on this torch


class Net(nn.Module):
    """Two Linears and (``root``) a root parameter from the rank's seed; two buffers holding the
    rank; (``frozen``) a frozen Linear."""

    def __init__(self, rank, frozen=False, root=True):
        super().__init__()
        torch.manual_seed(rank)
        self.a, self.b = nn.Linear(4, 3), nn.Linear(3, 2)
        self.w = nn.Parameter(torch.randn(3)) if root else torch.ones(3)
        self.f = nn.Linear(2, 2).requires_grad_(False) if frozen else None
        self.register_buffer("kept", torch.full((2,), float(rank)))
        self.register_buffer("own", torch.full((2,), float(rank)))

    def forward(self, x):
        y = self.b(self.a(x).tanh() * self.w) + self.kept + self.own
        return self.f(y) if self.f is not None else y


def _ddp(impl, model, **options):
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    return (torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP)(model, **options)


def _state(model):
    return {n: t.flatten().tolist() for n, t in model.state_dict().items()}


def _grads(model):
    return {n: p.grad.flatten().tolist() for n, p in model.named_parameters() if p.grad is not None}


def _ignored(rank, impl):
    """After construction, buffers after a forward (each rank first sets its own), gradients."""
    from ddpsim import torchcompat
    from ddpsim.minddp import NaiveDDP
    model = Net(rank)
    torchcompat.set_ddp_params_and_buffers_to_ignore(model, IGNORED)
    ddp = NaiveDDP(model) if impl == "naive" else _ddp(impl, model)
    out = {"init": _state(model)}
    with torch.no_grad():
        model.own.fill_(10 + rank), model.kept.fill_(20 + rank)
    torch.manual_seed(100 + rank)
    ddp(torch.randn(2, 4)).sum().backward()
    out.update(forward=[model.kept.tolist(), model.own.tolist()], grads=_grads(model))
    if impl == "torch":  # the recorder's list of torch's Reducer parameters
        from ddpsim.record import instrument
        reduced = {i for bucket in torchcompat.bucket_members(ddp) for i in bucket}
        out["recorder"] = {id(p) for p in instrument.reducer_params(model)} == reduced
    return out


def _delayed(rank, impl, caps):
    """SGD steps after PLAN, the delayed allreduce read after a barrier (gloo's waits for earlier work)."""
    model = Net(rank)
    named = dict(model.named_parameters())
    ddp = _ddp(impl, model, delay_all_reduce_named_params=[(n, named[n]) for n in DELAYED],
               param_to_hook_all_reduce=model.a.weight, **CAPS[caps])
    opt, steps, init = torch.optim.SGD(model.parameters(), lr=0.1), [], _state(model)
    for i, zero in enumerate(PLAN):
        if zero != "a":
            opt.zero_grad(set_to_none=zero == "n")
        torch.manual_seed(100 + 10 * i + rank)
        ddp(torch.randn(2, 4)).sum().backward()
        dist.barrier()
        storages = {named[n].grad.untyped_storage().data_ptr() for n in DELAYED}
        steps.append([_grads(model), len(storages)])
        opt.step()
    return {"init": init, "steps": steps, "final": _state(model)}


def _all_delayed(rank, impl, frozen, root):
    """Every parameter that requires a gradient delayed: construction, then the first forward."""
    model = Net(rank, frozen, root)
    delayed = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    try:
        ddp = _ddp(impl, model, delay_all_reduce_named_params=delayed, param_to_hook_all_reduce=model.a.weight)
    except ValueError as e:
        return ["ValueError", str(e)]
    out = [_state(model), hasattr(ddp, "reducer")]
    try:
        ddp(torch.ones(2, 4))
    except AttributeError as e:
        return out + [str(e)]
    return out + ["forward ran"]


def _errors(rank, impl):
    """What construction raises: one delay argument alone, modules with nothing to reduce, a lazy module."""
    from ddpsim import torchcompat
    model, out = Net(rank), []
    everything = Net(rank)
    torchcompat.set_ddp_params_and_buffers_to_ignore(everything, [n for n, _ in everything.named_parameters()])
    cases = [(model, dict(delay_all_reduce_named_params=[("a.weight", model.a.weight)])),
             (model, dict(param_to_hook_all_reduce=model.a.weight)),
             (nn.ReLU(), {}), (nn.Linear(2, 2).requires_grad_(False), {}), (everything, {}),
             (nn.LazyLinear(2), {})]  # a lazy module before its first forward
    for module, options in cases:
        try:
            _ddp(impl, module, **options)
            out.append("constructed")
        except (ValueError, RuntimeError) as e:
            out.append([type(e).__name__, str(e)])
    return out


def _every_case(rank, world):
    torch.set_num_threads(1)
    return {"ignored": {impl: _ignored(rank, impl) for impl in IMPLS + ("naive",)},
            "delayed": {caps: {impl: _delayed(rank, impl, caps) for impl in IMPLS} for caps in RUNNABLE},
            "all_delayed": {(impl, *case): _all_delayed(rank, impl, *case)
                            for impl in IMPLS for case in ALL_DELAYED},
            "errors": {impl: _errors(rank, impl) for impl in IMPLS}}


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_every_case, 2, timeout=300)


@pytest.mark.slow
def test_ignored_parameters_and_buffers_as_torch(ranks):
    r0, r1 = (r["ignored"] for r in ranks)
    for r in (r0, r1):
        assert r["minddp"] == {k: v for k, v in r["torch"].items() if k != "recorder"}
        assert r["torch"]["recorder"]
    # the submodule's ignored weight and the ignored buffer stay each rank's own, the rest is rank 0's
    assert r0["torch"]["init"]["a.weight"] != r1["torch"]["init"]["a.weight"]
    assert r0["torch"]["init"]["own"] != r1["torch"]["init"]["own"]
    assert r0["torch"]["init"]["kept"] == r1["torch"]["init"]["kept"] == [0.0, 0.0]
    assert r0["torch"]["init"]["a.bias"] == r1["torch"]["init"]["a.bias"]
    # the root's "w": not broadcast, yet reduced (the Reducer spells it ".w")
    assert r0["torch"]["init"]["w"] != r1["torch"]["init"]["w"]
    assert r0["torch"]["grads"]["w"] == r1["torch"]["grads"]["w"]
    # before the forward: "kept" is rank 0's again, "own" is left alone
    assert r0["torch"]["forward"] == [[20.0, 20.0], [10.0, 10.0]]
    assert r1["torch"]["forward"] == [[20.0, 20.0], [11.0, 11.0]]
    # gradients: the ignored weight's is the rank's own, the others are averaged
    assert r0["torch"]["grads"]["a.weight"] != r1["torch"]["grads"]["a.weight"]
    assert r0["torch"]["grads"]["a.bias"] == r1["torch"]["grads"]["a.bias"]
    for r in (r0, r1):  # NaiveDDP leaves the same names alone
        assert r["naive"]["init"] == r["torch"]["init"]
        assert r["naive"]["grads"]["a.weight"] == r["torch"]["grads"]["a.weight"]


@pytest.mark.slow
@pytest.mark.parametrize("caps", [pytest.param(c, marks=() if c in RUNNABLE else needs_capacity_config) for c in CAPS])
def test_delayed_allreduce_as_torch(ranks, caps):
    r0, r1 = (r["delayed"][caps] for r in ranks)
    for r in (r0, r1):
        assert r["minddp"] == r["torch"]
        assert all(storages == 1 for _, storages in r["torch"]["steps"])  # .grad: views of one buffer
    assert r0["torch"]["init"] == r1["torch"]["init"]  # the delayed parameters are broadcast too
    for (g0, _), (g1, _) in zip(r0["torch"]["steps"], r1["torch"]["steps"]):
        assert g0 == g1  # the delayed gradients are averaged (read after the barrier)
    assert r0["torch"]["final"] == r1["torch"]["final"]


@pytest.mark.slow
def test_all_parameters_delayed_as_torch(ranks):
    for r in ranks:
        for case in ALL_DELAYED:
            assert r["all_delayed"][("minddp", *case)] == r["all_delayed"][("torch", *case)]
        assert r["all_delayed"][("torch", False, False)] == [
            "ValueError", "DistributedDataParallel's input module must be on the same type of devices, "
            "but input module parameters locate in set()."]
        _, reducer, error = r["all_delayed"][("torch", True, False)]
        assert not reducer and error == "'DistributedDataParallel' object has no attribute '_lazy_init_ran'"
        # a delayed root parameter still counts as one left to DDP (spelled ".w"): a Reducer, a forward
        assert r["all_delayed"][("torch", True, True)][1:] == [True, "forward ran"]
    s0, s1 = (r["all_delayed"][("torch", True, False)][0] for r in ranks)
    assert s0["a.weight"] == s1["a.weight"] and s0["b.bias"] == s1["b.bias"]  # the delayed: broadcast
    assert s0["kept"] != s1["kept"] and s0["f.weight"] != s1["f.weight"]  # nothing else is


@pytest.mark.slow
def test_construction_errors_as_torch(ranks):
    together = ["ValueError", "delay_all_reduce_named_params and param_to_hook_all_reduce need to be set "
                "at the same time."]
    not_needed = ["RuntimeError", "DistributedDataParallel is not needed when a module doesn't have any "
                  "parameter that requires a gradient."]
    for r in ranks:
        assert r["errors"]["minddp"] == r["errors"]["torch"] == [together, together] + [not_needed] * 3 + [
            ["RuntimeError", "Modules with uninitialized parameters can't be used with `DistributedDataParallel`. "
                             "Run a dummy forward pass to correctly initialize the modules"]]
