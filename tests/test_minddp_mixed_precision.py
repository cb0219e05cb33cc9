"""DDP's ``mixed_precision`` (torch 2.13's ``_MixedPrecision``): minddp against torch's DDP on real
gloo ranks without an accelerator, where torch stops at the first forward (Note [Mixed precision
stops at the first forward on CPU] in ddpsim/minddp/mixed_precision.py): the construction's log,
parameters, low-precision twins and buffers, then the error of each forward, the state it leaves,
and the refused second comm hook, compared bit for bit."""
import ast
import logging
import subprocess
import sys

import pytest
import torch
from torch import nn

from conftest import ROOT
from ddpsim import torchcompat
from distutil import run_ranks

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
# name -> (param_dtype, reduce_dtype, buffer_dtype)
CONFIGS = {
    "f16": (F16, F16, F16),
    "bf16": (BF16, BF16, BF16),
    "f16 params, f32 reduce and buffers": (F16, F32, F32),
    "bf16 params, f32 reduce": (BF16, F32, None),
    "bf16 reduce only": (None, BF16, None),
    "f16 params only": (F16, None, None),
    "all None": (None, None, None),
}
OPTIONS = {"default": {}, "find_unused_parameters": dict(find_unused_parameters=True),
           "gradient_as_bucket_view": dict(gradient_as_bucket_view=True),
           "names ignored": dict(ignore=["bn.weight", "bn.running_mean"])}  # _set_params_and_buffers_to_ignore_for_model
LOGGERS = {"torch": "torch.nn.parallel.distributed", "minddp": "ddpsim.minddp.mixed_precision"}


class RootLinear(nn.Linear):
    """A Linear with parameters of its own on the root module, a BatchNorm child (buffers, one of
    them int64), initialised from the rank's seed."""

    def __init__(self, rank):
        torch.manual_seed(rank)
        super().__init__(3, 2)
        self.bn = nn.BatchNorm1d(2)

    def forward(self, x):
        return self.bn(super().forward(x))


def _error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        return f"{type(e).__name__}: {e}"
    return "no error"


def _gloo_calls(fn):
    """(fn's result, how many gloo collectives it issued: torch's profiler)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = fn()
    return out, sum(e.name.startswith("gloo:") for e in prof.events())


def _params(model):
    return [(n, str(p.dtype), p.flatten().tolist(), *_twins(p), getattr(p, "_idx", None),
             None if p.grad is None else (str(p.grad.dtype), p.grad.flatten().tolist()))
            for n, p in model.named_parameters()]


def _twins(p):
    """The low-precision twin's dtype, storage, requires_grad, and which of the twins ``p`` holds (None:
    no twins, a parameter DDP ignores)."""
    if not hasattr(p, "_mp_param"):
        return (None,)
    return (str(p._mp_param.dtype), p._mp_param.untyped_storage().size(), p._mp_param.requires_grad,
            p.data_ptr() == p._mp_param.data_ptr(), p.data_ptr() == p._fp_param.data_ptr())


def _buffers(model):
    return [(n, str(b.dtype), b.flatten().tolist()) for n, b in model.named_buffers()]


def _one_case(rank, impl, dtypes, options):
    """Everything a user can see of one DDP with mixed_precision, from construction to the refused
    comm hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    from ddpsim.minddp import DistributedDataParallel as MinDDP

    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    records, handler = [], logging.Handler()
    handler.emit = lambda r: records.append((r.levelname, r.getMessage()))
    logging.getLogger(LOGGERS[impl]).addHandler(handler)
    try:
        model, options = RootLinear(rank), dict(options)
        if "ignore" in options:
            torchcompat.set_ddp_params_and_buffers_to_ignore(model, options.pop("ignore"))
        made = []
        construction, built = _gloo_calls(lambda: _error(lambda: made.append(
            cls(model, mixed_precision=torchcompat.mixed_precision_class()(*dtypes), **options))))
    finally:
        logging.getLogger(LOGGERS[impl]).removeHandler(handler)
    out = {"log": records, "construction": construction, "constructed": (_params(model), _buffers(model), built > 0)}
    x = torch.linspace(-1, 1, 12).reshape(4, 3) + rank
    if not made:  # a CUDA build with no usable GPU: refused at construction, leaving no hook on the module
        out["bare module"] = _gloo_calls(lambda: _error(lambda: model(x)))
        return out
    ddp = made[0]
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.3)  # an accumulated gradient: the copy hook casts it down
    out["forward"] = _gloo_calls(lambda: _error(lambda: ddp(x)))
    out["after forward"] = (_params(model), _buffers(model))
    with torch.no_grad():
        out["no_grad forward"] = _gloo_calls(lambda: _error(lambda: ddp(x)))
    out["bare module"] = _gloo_calls(lambda: _error(lambda: ddp.module(x)))
    out["register_comm_hook"] = _error(lambda: ddp.register_comm_hook(None, allreduce_hook))
    out["after all"] = (_params(model), _buffers(model))
    return out


def _every_case(rank, world):
    """Every case on both implementations, and what ``torch.Stream()`` (the side stream DDP makes
    at construction) does in this build: the oracle of which way torch stops."""
    torch.set_num_threads(1)
    cases = {(config, option, impl): _one_case(rank, impl, dtypes, options)
             for config, dtypes in CONFIGS.items() for option, options in OPTIONS.items()
             for impl in ("torch", "minddp")}
    return {**cases, "torch.Stream()": _error(torch.Stream)}


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_every_case, 2, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("option", list(OPTIONS))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_minddp_stops_where_torch_stops(ranks, config, option):
    for rank, cases in enumerate(ranks):
        torch_out, ours = cases[(config, option, "torch")], cases[(config, option, "minddp")]
        for key in torch_out:
            assert ours[key] == torch_out[key], f"rank {rank}, {key}"


@pytest.mark.slow
def test_what_torch_does_without_an_accelerator(ranks):
    """The figures of Note [Mixed precision stops at the first forward on CPU], on torch itself: a
    CPU build stops at the first forward, a CUDA build with no usable GPU at construction, with the
    error of ``torch.Stream()``."""
    refused = "RuntimeError: cpu backend doesn't support events."
    f16, stream = ranks[1][("f16", "default", "torch")], ranks[1]["torch.Stream()"]
    assert f16["log"] == [("WARNING", "Received mixed precision config _MixedPrecision(param_dtype=torch.float16, "
                                      "reduce_dtype=torch.float16, buffer_dtype=torch.float16)")]
    assert [b[1] for b in f16["constructed"][1]] == ["torch.float16"] * 3  # num_batches_tracked too
    assert f16["constructed"][2]  # the construction's broadcast ran on either build
    root = {p[0]: p for p in f16["constructed"][0]}
    assert root["weight"][1:2] + root["weight"][3:8] == ("torch.float32", "torch.float16", 0, True, False, True)
    if stream != "no error":  # a CUDA build: the side stream is refused, nothing runs after it
        assert stream.startswith(("AcceleratorError: ", "RuntimeError: ")), stream
        assert f16["construction"] == stream and "forward" not in f16
        assert f16["bare module"][1] == 0 and f16["bare module"][0] != stream  # no hook left on the module
        assert ranks[1][("all None", "default", "torch")]["bare module"] == ("no error", 0)  # nothing was cast
    else:
        assert f16["construction"] == "no error"
        assert f16["forward"] == (refused, 1)  # after the buffer broadcast
        assert f16["no_grad forward"][0] == f16["bare module"][0] == refused
        root = {p[0]: p for p in f16["after forward"][0]}
        assert root["weight"][1] == "torch.float16" and root["weight"][9][0] == "torch.float16"
        assert root["bn.weight"][1] == "torch.float32" and root["bn.weight"][9][0] == "torch.float32"
        assert f16["register_comm_hook"] == ("RuntimeError: register_comm_hook or register_builtin_comm_hook "
                                             "can only be called once.")
    ignored = ranks[0][("f16", "names ignored", "torch")]  # left in full precision, with no twin
    params, buffers = {p[0]: p for p in ignored["constructed"][0]}, {n: d for n, d, _ in ignored["constructed"][1]}
    assert params["bn.weight"][3] is None and params["weight"][3] == "torch.float16"
    assert buffers["bn.running_mean"] == "torch.float32" and buffers["bn.running_var"] == "torch.float16"


ALONE = """
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method=sys.argv[1], rank=0, world_size=1)
from ddpsim import torchcompat
if sys.argv[2] == "torch":
    cls = torch.nn.parallel.DistributedDataParallel
else:
    from ddpsim.minddp import DistributedDataParallel as cls
try:
    ddp = cls(torch.nn.Linear(4, 2), mixed_precision=torchcompat.mixed_precision_class()(torch.float16))
    ddp(torch.randn(3, 4))
except Exception as e:
    print(repr(f"{type(e).__name__}: {e}"))
dist.destroy_process_group()
"""


def _alone(tmp_path, impl):
    """The error ``impl``'s DDP raises, constructed and called in a process of its own."""
    out = subprocess.run([sys.executable, "-c", ALONE, f"file://{tmp_path / impl}", impl], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    return [ast.literal_eval(line) for line in out.stdout.strip().splitlines()[-1:]], out.stderr[-800:]


def test_minddp_alone_in_a_process_stops_at_the_first_forward_too(tmp_path):
    """In a process where torch's DDP never ran, minddp's construction raised AttributeError "module
    'torch.distributed' has no attribute '_functional_collectives'" (torch's _free_storage reads it, and
    torch's DDP has it loaded by then); now it stops where torch does, alone in its process too (a CPU
    build at the first forward, a CUDA build with no usable GPU at construction)."""
    (theirs, their_err), (ours, our_err) = _alone(tmp_path, "torch"), _alone(tmp_path, "minddp")
    assert theirs and theirs[0].startswith(("RuntimeError: ", "AcceleratorError: ")), their_err
    assert ours == theirs, our_err
