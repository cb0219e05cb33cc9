"""``batched_grad_copy`` (torch 2.13): minddp against torch's DDP on real gloo ranks, bit for bit
(Note [Batched copies divide the flat bucket] in ddpsim/minddp/batched_copy.py)."""
import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from distutil import run_ranks
from torchgates import needs_ddp

TWO_BUCKETS = 200 / 2**20  # MiB: c and u (264 bytes) in one bucket, a (168 bytes) in the other


class Net(nn.Module):
    """Two Linears used on every rank; ``u`` used only when ``use_u``."""

    def __init__(self, use_u):
        super().__init__()
        self.a, self.u, self.c = nn.Linear(5, 7), nn.Linear(5, 7), nn.Linear(7, 3)
        self.use_u = use_u

    def forward(self, x):
        y = self.a(x).tanh()
        return self.c(y + self.u(x) if self.use_u else y)


HOOKS = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook}

# Plans, one letter per iteration: n = zero_grad(set_to_none=True) then a synced step,
# z = zero_grad(set_to_none=False) then a synced step, a = a synced step that accumulates into
# the last .grad, s = a step under no_sync (accumulates, no allreduce).
CASES = {  # name -> (DDP options, plan, hook, use_u)
    "plain": ({}, "nazn", None, True),
    "view": (dict(gradient_as_bucket_view=True), "nazn", None, True),
    "no_sync": ({}, "nssan", None, True),
    "no_sync, view": (dict(gradient_as_bucket_view=True), "zssan", None, True),
    "find_unused": (dict(find_unused_parameters=True), "nazn", None, False),
    "find_unused, view": (dict(find_unused_parameters=True, gradient_as_bucket_view=True), "nzan", None, False),
    "static_graph": (dict(static_graph=True), "nnan", None, True),
    "allreduce_hook": ({}, "nazn", "allreduce", True),
    "fp16_hook, view": (dict(gradient_as_bucket_view=True), "nazn", "fp16", True),
}


def _train(rank, impl, batched, options, plan, hook, use_u):
    """Every parameter's .grad after each iteration of ``plan`` (None where it has none)."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = Net(use_u)
    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    ddp = cls(model, bucket_cap_mb=TWO_BUCKETS, batched_grad_copy=batched, **options)
    if hook:
        ddp.register_comm_hook(None, HOOKS[hook])
    out, gen = [], torch.Generator().manual_seed(rank)
    for step in plan:
        if step in "nz":
            model.zero_grad(set_to_none=step == "n")
        x = torch.randn(4, 5, generator=gen)
        if step == "s":
            with ddp.no_sync():
                ddp(x).square().sum().backward()
        else:
            ddp(x).square().sum().backward()
        out.append([None if p.grad is None else p.grad.flatten().tolist() for p in model.parameters()])
    return out


def _every_case(rank, world):
    return {name: {(impl, batched): _train(rank, impl, batched, *case)
                   for impl in ("torch", "minddp") for batched in (False, True)}
            for name, case in CASES.items()}


@pytest.fixture(scope="module", params=[2, 3], ids=["2 ranks", "3 ranks"])
def ranks(request):
    return request.param, run_ranks(_every_case, request.param, timeout=300)


@needs_ddp("batched_grad_copy")
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_minddp_matches_torch_bit_for_bit_with_and_without_batching(ranks, case):
    _, results = ranks
    for rank in results:
        for batched in (False, True):
            assert rank[case][("minddp", batched)] == rank[case][("torch", batched)], (case, batched)


def _max_difference(one, other):
    return max(abs(x - y) for it_one, it_other in zip(one, other) for g1, g2 in zip(it_one, it_other)
               if g1 is not None for x, y in zip(g1, g2))


@needs_ddp("batched_grad_copy")
@pytest.mark.slow
def test_what_batching_changes_in_torch(ranks):
    """torch 2.13: on 3 ranks x * (1/3) and x / 3 differ in the last bits; on 2 ranks 1/2 is exact;
    a comm hook divides by itself, so batching changes nothing there."""
    world, results = ranks
    for case in CASES:
        plain, batched = results[0][case][("torch", False)], results[0][case][("torch", True)]
        if world == 2 or CASES[case][2] is not None:
            assert batched == plain, case
        else:
            assert batched != plain and 0 < _max_difference(batched, plain) < 1e-5, case


def _wrapped(rank, world):
    """``record``'s DDP (record/wrap.py) for each impl, with and without --batched-grad-copy."""
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.wrap import wrap_model

    out = []
    for impl in ("torch", "minddp"):
        for batched in (False, True):
            ddp = wrap_model(RecordConfig(impl=impl, batched_grad_copy=batched), Net(True), None, torch.device("cpu"))
            out.append((impl, batched, ddp.batched_grad_copy))
    return out


@needs_ddp("batched_grad_copy")
@pytest.mark.slow
def test_record_gives_the_option_to_torch_and_minddp(record):
    assert all(given == got for _, given, got in run_ranks(_wrapped, 1)[0])
    trace = record(model="mlp", world_size=2, iters=2, impl="minddp", batched_grad_copy=True)
    assert trace.meta["options"]["batched_grad_copy"] is True
    plain = record(model="mlp", world_size=2, iters=2, impl="torch", name="plain")
    assert "batched_grad_copy" not in plain.meta["options"]  # written only when given


def test_record_refuses_it_in_one_line_where_it_cannot_be_given(monkeypatch):
    from ddpsim import torchcompat
    from ddpsim.errors import CLIError
    from ddpsim.record.config import RecordConfig

    with pytest.raises(CLIError, match="--batched-grad-copy needs --impl torch or minddp"):
        RecordConfig(impl="naive", batched_grad_copy=True).validate()
    monkeypatch.setattr(torchcompat, "ddp_takes", lambda name: name != "batched_grad_copy")  # an older torch's DDP
    with pytest.raises(CLIError, match=r"--batched-grad-copy: this torch \(.*\) has no DistributedDataParallel"
                                       r"\(batched_grad_copy\) \(torch 2.13 has it\)$"):
        RecordConfig(impl="torch", batched_grad_copy=True).validate()
    RecordConfig(impl="minddp", batched_grad_copy=True).validate()  # minddp has it whatever the torch
