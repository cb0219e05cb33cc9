"""The model zoo: every workload follows the contract of ddpsim/models/__init__.py."""
from __future__ import annotations

import pytest
import torch

from ddpsim import torchcompat
from ddpsim.minddp.construction import build_params_for_reducer

from ddpsim.models import (ModelSpecError, Training, build_workload, call_batch, resolve_factory,
                           zoo)
from ddpsim.models.mlp import branch_used

NAMES = ["mlp", "convnet", "transformer", "branchy", "shuffled"]


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _build(name: str) -> Training:
    torch.manual_seed(0)
    return build_workload(name)


def _ddp_params(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """DDP's parameter list (named_modules x named_parameters(recurse=False), requires_grad, once)."""
    return build_params_for_reducer(model)[0]


def _equal(a, b) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)


def test_zoo_names():
    assert sorted(zoo()) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_forward_backward(name):
    w = _build(name)
    assert isinstance(w, Training) and w.default_batch_size > 0
    inputs, target = call_batch(w, 0, 0, 2, 4)
    loss = w.loss(w.model(*inputs), target)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    params = _ddp_params(w.model)  # (branchy uses its branch at iteration 0, rank 0)
    assert params and all(p.grad is not None and torch.isfinite(p.grad).all() for p in params)
    assert any(p.grad.abs().sum() > 0 for p in params)


@pytest.mark.parametrize("name", NAMES)
def test_batch_is_deterministic_and_varies(name):
    w = _build(name)
    rng = torch.get_rng_state()
    a = call_batch(w, 3, 1, 2, 4)
    assert torch.equal(torch.get_rng_state(), rng), "batch must not touch the global RNG"
    torch.manual_seed(123)  # the global seed must not matter either
    assert _equal(a, call_batch(w, 3, 1, 2, 4))
    assert _equal(a, call_batch(_build(name), 3, 1, 2, 4))  # nor a fresh factory call
    x = a[0][0]
    assert not torch.equal(x, call_batch(w, 3, 0, 2, 4)[0][0])  # another rank
    assert not torch.equal(x, call_batch(w, 4, 1, 2, 4)[0][0])  # another iteration
    assert x.shape[0] == 4 and a[1].shape[0] == 4


def test_convnet_has_buffers():
    model = _build("convnet").model
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    names = [n for n, _ in model.named_buffers()]
    assert any(n.endswith("running_mean") for n in names)


def test_transformer_head_is_tied_to_embedding():
    model = _build("transformer").model
    assert model.head.weight is model.tok_emb.weight
    params = _ddp_params(model)
    assert sum(p is model.tok_emb.weight for p in params) == 1
    assert len(params) == len(list(model.parameters()))  # parameters() also dedups


def test_mlp_has_one_frozen_param():
    model = _build("mlp").model
    frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen == ["proj.weight"]
    assert len(_ddp_params(model)) == len(list(model.parameters())) - 1


@pytest.mark.parametrize("iteration,rank", [(0, 0), (0, 1), (1, 0), (1, 1), (2, 1), (5, 0)])
def test_branchy_branch_grads_follow_iteration_and_rank(iteration, rank):
    w = _build("branchy")
    inputs, target = call_batch(w, iteration, rank, 2, 4)
    used = (iteration + rank) % 2 == 0
    assert branch_used(iteration, rank) == used and bool(inputs[1]) == used
    w.loss(w.model(*inputs), target).backward()
    branch = list(w.model.branch.parameters())
    assert len(branch) == 4
    if used:
        assert all(p.grad is not None for p in branch)
    else:
        assert all(p.grad is None for p in branch)
    assert all(p.grad is not None for p in w.model.trunk.parameters())
    assert all(p.grad is not None for p in w.model.head.parameters())


def test_branchy_iteration0_unused_on_some_rank():
    w = _build("branchy")
    flags = [bool(call_batch(w, 0, r, 2, 2)[0][1]) for r in range(2)]
    assert flags == [True, False]


def test_shuffled_grad_order_is_not_reverse_definition_order():
    w = _build("shuffled")
    params = _ddp_params(w.model)
    index = {id(p): i for i, p in enumerate(params)}
    order: list[int] = []
    for p in params:
        p.register_post_accumulate_grad_hook(lambda p: order.append(index[id(p)]))
    inputs, target = call_batch(w, 0, 0, 1, 4)
    w.loss(w.model(*inputs), target).backward()
    assert sorted(order) == list(range(len(params)))
    reverse_definition = list(range(len(params)))[::-1]
    assert order != reverse_definition
    # Not even at layer granularity (DDP's order inside a Linear is bias, weight anyway).
    layer_of = {id(p): n.rpartition(".")[0] for n, p in w.model.named_parameters()}
    layers_ready = list(dict.fromkeys(layer_of[id(params[i])] for i in order))
    layers_defined = list(dict.fromkeys(layer_of[id(p)] for p in params))
    assert layers_ready != layers_defined[::-1]
    assert layers_ready == ["out"] + [f"block{i}" for i in reversed(range(14))] + ["inp"]


def test_shuffled_has_several_default_buckets():
    params = _ddp_params(_build("shuffled").model)
    buckets, _ = torchcompat.compute_bucket_assignment_by_size(
        params, [1024 * 1024, 25 * 1024 * 1024])
    assert len(buckets) >= 3


def test_unknown_model_is_one_line_error():
    with pytest.raises(ModelSpecError) as e:
        resolve_factory("nope")
    msg = str(e.value)
    assert "\n" not in msg and "nope" in msg and "mlp" in msg


def test_zoo_names_are_known_without_torch():
    """The app lists the zoo without importing torch (ddpsim.models.ZOO_NAMES)."""
    from ddpsim.models import ZOO_NAMES, zoo

    assert tuple(zoo()) == ZOO_NAMES


def test_a_model_file_with_a_dataclass_loads(tmp_path):
    """A file given as path.py:factory runs as an imported module would: a dataclass under
    ``from __future__ import annotations`` looks its module up in sys.modules (it failed with
    "'NoneType' object has no attribute '__dict__'")."""
    import pickle

    from ddpsim.models import load_callable

    path = tmp_path / "dc.py"
    path.write_text("from __future__ import annotations\nfrom dataclasses import dataclass\n\n"
                    "@dataclass\nclass Cfg:\n    hidden: int = 64\n\n"
                    "def factory():\n    return Cfg()\n")
    assert load_callable(str(path), "factory")().hidden == 64
    other = tmp_path / "b" / "dc.py"  # another file of the same name keeps its own module
    other.parent.mkdir()
    other.write_text(path.read_text().replace("64", "32"))
    made = load_callable(str(path), "factory")()
    assert load_callable(str(other), "factory")().hidden == 32
    assert pickle.loads(pickle.dumps(made)).hidden == 64  # pickle finds the class of the first file
