"""The error keys of ``_get_ddp_logging_data()`` (``has_error``, ``error``): minddp against torch 2.13's
DDP, side by side on 2 real gloo ranks, one spawn for every case (Note [Errors in the logging data] in
ddpsim/minddp/logging_data.py).

Each case runs a few steps on a fresh DDP of each kind; after every step it keeps what the step
raised (type and message) and the logging data. torch's and minddp's must be equal, less the timing
keys (each process's own: tests/test_minddp_logging_timing.py) and, where minddp words the error its
own way (``OWN_WORDS``), the ``error`` text: there each must hold the message it raised."""

import pytest
import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.utils.checkpoint import checkpoint

from ddpsim import torchcompat
from distutil import run_ranks


class Branches(nn.Module):
    """``b`` takes part in the forwards ``uses_b`` says yes to (by call number, from 1)."""

    def __init__(self, uses_b=lambda call: True):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b, self.uses_b, self.calls = nn.Linear(4, 2), nn.Linear(4, 2), uses_b, 0

    def forward(self, x):
        self.calls += 1
        return self.a(x) + self.b(x) if self.uses_b(self.calls) else self.a(x)


class SplitHeads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.t, self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)

    def forward(self, x):
        h = self.t(x)
        return self.a(h), self.b(h)


class CheckpointedTwice(nn.Module):
    """``shared`` runs under two reentrant checkpoints: its hooks fire twice."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.shared = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        return checkpoint(self.shared, checkpoint(self.shared, self.a(x), use_reentrant=True), use_reentrant=True)


def bucket_annotated(state, bucket: int):  # the wrong annotation for ``bucket``
    return default_hooks.allreduce_hook(state, bucket)


def returns_annotated(state, bucket) -> int:  # the wrong return annotation
    return default_hooks.allreduce_hook(state, bucket)


def no_bucket(state, b):  # no parameter named ``bucket``
    return default_hooks.allreduce_hook(state, b)


def _step(ddp, rank, backward=lambda y: y.sum().backward()):
    ddp.module.zero_grad(set_to_none=True)
    backward(ddp(torch.full((2, 4), float(rank + 1))))


def _heads_backward(y):
    """The synced pass leaves ``b`` undefined; a second, local pass marks ``b`` used."""
    y[0].sum().backward(retain_graph=True)
    y[1].sum().backward()


def _find_common_rank(ddp, rank):
    """``_find_common_rank`` (minddp: ``find_common_rank``) where no rank's condition holds."""
    return torchcompat.find_common_rank(ddp, rank, False)


def _builtin(ddp):
    torchcompat.register_builtin_comm_hook(ddp, "ALLREDUCE")


# name: (model, DDP options, steps); a step is f(ddp, rank). Every rank fails alike (no hang).
CASES = {
    # distributed.py's _log_and_throw, after construction
    "hook not callable": (Branches, {}, [lambda d, r: d.register_comm_hook(None, 42)]),
    "hook's bucket annotation": (Branches, {}, [lambda d, r: d.register_comm_hook(None, bucket_annotated)]),
    "hook's return annotation": (Branches, {}, [lambda d, r: d.register_comm_hook(None, returns_annotated)]),
    "bf16 hook on CPU": (Branches, {}, [lambda d, r: d.register_comm_hook(None, default_hooks.bf16_compress_hook),
                                        _step]),
    "sample rate 0": (Branches, {}, [_step, lambda d, r: torchcompat.set_ddp_runtime_logging_sample_rate(d, 0), _step]),
    "no common rank": (Branches, {}, [_step, _find_common_rank]),
    # reducer.cpp's REDUCER_CHECK
    "second comm hook": (Branches, {}, [lambda d, r: d.register_comm_hook(None, default_hooks.allreduce_hook)] * 2),
    "second builtin hook": (Branches, {}, [lambda d, r: _builtin(d)] * 2),
    "late _set_static_graph": (Branches, {}, [_step, lambda d, r: d._set_static_graph(), _step, _step]),
    "static graph changed": (lambda: Branches(lambda call: call > 1), dict(static_graph=True), [_step] * 3),
    "used, yet undefined": (SplitHeads, dict(find_unused_parameters=True),
                            [lambda d, r: _step(d, r, _heads_backward)] * 2),
    "missing gradient": (lambda: Branches(lambda call: False), {}, [_step] * 3),
    "missing gradient, static_graph": (lambda: Branches(lambda call: call == 1), dict(static_graph=True), [_step] * 4),
    "marked ready twice": (CheckpointedTwice, {}, [_step]),
    # not logged by torch: a KeyError of inspect's, pybind11's argument check
    "hook without bucket": (Branches, {}, [lambda d, r: d.register_comm_hook(None, no_bucket)]),
    "builtin hook of a wrong type": (Branches, {}, [lambda d, r: d._register_builtin_comm_hook("ALLREDUCE")]),
}
# how minddp's own words for an error begin (the missing gradient, marked ready twice: minddp/messages.py);
# there each side's ``error`` must hold the message it raised
OWN_WORDS = "minddp (rank "


def _run(cls, name, rank):
    """The steps of case ``name`` on a fresh ``cls`` DDP: (outcome, logging data) after each."""
    make, options, steps = CASES[name]
    ddp = cls(make(), **options)
    seen = []
    for step in steps:
        try:
            step(ddp, rank)
            outcome = "ok"
        except Exception as e:  # noqa: BLE001 - the outcome is what is compared
            builtin = next(c for c in type(e).__mro__ if c.__module__ == "builtins")  # MissingGradientError: RuntimeError
            outcome = (builtin.__name__, str(e))
        data = torchcompat.ddp_logging_data(ddp)
        seen.append((outcome, {k: v for k, v in data.items() if not (k.endswith("_time") or "_time_" in k)}))
    return seen


def errors_rank(rank, world):
    """Every case on torch's DDP, then on minddp's."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)
    return {(impl, name): _run(cls, name, rank) for impl, cls in (("torch", nn.parallel.DistributedDataParallel),
                                                                  ("minddp", MinDDP)) for name in CASES}


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(errors_rank, 2, timeout=240)


@pytest.mark.slow  # real gloo ranks
@pytest.mark.parametrize("name", list(CASES))
def test_error_keys_as_torchs(ranks, name):
    """After every step, the same logging data (has_error, error, iteration and every other key)."""
    for out in ranks:
        for (their_outcome, theirs), (our_outcome, ours) in zip(out["torch", name], out["minddp", name], strict=True):
            if our_outcome != "ok" and our_outcome[1].startswith(OWN_WORDS):  # each holds what it raised
                assert theirs.pop("error") == their_outcome[1] and ours.pop("error") == our_outcome[1]
            assert ours == theirs, (name, ours, theirs)


@pytest.mark.slow  # real gloo ranks
@pytest.mark.parametrize("name", ["missing gradient", "missing gradient, static_graph", "marked ready twice"])
def test_own_words_carry_torchs_diagnosis(ranks, name):
    """Where minddp words an error its own way, it quotes torch's first words, and its advice follows
    torch's case: under static_graph the training graph changed (it had advised find_unused_parameters)."""
    quoted = {"missing gradient": "Expected to have finished reduction in the prior iteration before starting a new one",
              "missing gradient, static_graph": "your training graph has changed in this iteration",
              "marked ready twice": "Expected to mark a variable ready only once"}[name]
    for out in ranks:
        failed = [(t[1], o[1]) for (t, _), (o, _) in zip(out["torch", name], out["minddp", name]) if o != "ok"]
        assert failed
        for theirs, ours in failed:
            assert quoted in theirs and quoted in ours and ours.startswith(OWN_WORDS), (theirs, ours)
            if name.startswith("missing gradient"):
                assert ("static_graph" in name) == ("pass find_unused_parameters=True" not in ours), ours


@pytest.mark.slow  # real gloo ranks
@pytest.mark.parametrize("name", list(CASES))
def test_same_steps_fail(ranks, name):
    """The same steps fail, with errors of the same type (minddp's own errors: messages.py); the
    case without a ``bucket`` parameter is torch's KeyError, minddp's TypeError (minddp/comm_hook.py).
    A CUDA build of torch takes the bf16 hook without a GPU (its _check_comm_hook asks for CUDA and
    NCCL >= 2.10, not a device) and runs it on gloo: there no step fails, on either side."""
    cuda_build = torch.version.cuda is not None or torch.version.hip is not None
    for out in ranks:
        theirs = [o if o == "ok" else o[0] for o, _ in out["torch", name]]
        ours = [o if o == "ok" else o[0] for o, _ in out["minddp", name]]
        if name == "hook without bucket":
            assert (theirs, ours) == (["KeyError"], ["TypeError"])
        else:
            assert ours == theirs
        assert set(theirs) != {"ok"} or (name == "bf16 hook on CPU" and cuda_build), theirs
