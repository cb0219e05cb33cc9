"""DDP's ``mixed_precision`` argument (torch 2.13's ``_MixedPrecision``: ``param_dtype``,
``reduce_dtype``, ``buffer_dtype``), as far as torch runs it without an accelerator.

Note [Mixed precision stops at the first forward on CPU]: with ``mixed_precision``, torch 2.13's
constructor gives every parameter a low-precision twin with no storage (``_mp_param``) and a name
for its full-precision data (``_fp_param``), casts *every* buffer to ``buffer_dtype`` (integer ones
too: BatchNorm's ``num_batches_tracked`` becomes float16), registers its own comm hook
(``_reducer_allreduce_and_upcast_hook``, so a later ``register_comm_hook`` is refused as a second
one) and a forward pre-hook on the wrapped module (``_root_copy_hook``). That hook copies each
submodule's parameters into their low-precision twins on a side stream, then records a
``torch.Event`` for the submodule's forward to wait on. Without an accelerator ``torch.Event``
is a CPU event, and recording it raises ``RuntimeError: cpu backend doesn't support events.``:
measured on a CPU-only torch 2.13 on 2 gloo ranks, with every mix of float16, bfloat16, float32
and None tried, at every forward (with or without grad, through DDP or the bare module), after the
buffer broadcast of ``_pre_forward``; by then the wrapped module's own parameters (not its
children's) hold their float16/bfloat16 twins and their ``.grad`` is cast down. Nothing
low-precision ever runs on CPU. minddp does the same steps with torch's own pieces and so stops
at the same point, with the same error (tests/test_minddp_mixed_precision.py). What follows the
event in torch (each submodule waiting on its event, the low-precision backward, the hook's
reduction in ``reduce_dtype`` and upcast) needs an accelerator and is not mirrored: where the
event records, minddp raises ``NotImplementedError``. On a CUDA build of torch with no usable GPU
(torch 2.14.1's CUDA 13 wheel, no driver), ``torch.Stream()`` itself fails (``AcceleratorError:
CUDA error: CUDA driver version is insufficient for CUDA runtime version``), so the constructor
stops there, after the twins and the buffers' cast, before any hook; minddp creates its stream at
the same point and stops there too. Parameters and buffers DDP ignores (Note [Names DDP
ignores] in minddp/construction.py) keep their full precision, as in torch.

``_mp_param``, ``_fp_param`` and ``_idx`` are torch's own attribute names, set on the parameters under
those names because torch's upcast hook (mixed_precision_hooks.py, run unchanged) reads them.
"""
from __future__ import annotations

import functools
import logging

import torch

from ddpsim import torchcompat

logger = logging.getLogger(__name__)
NOT_MIRRORED = ("minddp mirrors DDP's mixed_precision only up to the first forward's copy event, where "
                "torch 2.13 stops without an accelerator (Note [Mixed precision stops at the first forward on "
                "CPU] in ddpsim/minddp/mixed_precision.py)")


def log_config(config):
    """Mirrors where ``DistributedDataParallel.__init__`` keeps ``mixed_precision``: it logs it
    (torch's ``logger.warning``, same text), before the ``check_reduction`` warning; returns it."""
    if config is not None:
        logger.warning("Received mixed precision config %s", config)
    return config


def setup_mixed_precision(ddp, params) -> None:
    """Mirrors the ``if self.mixed_precision is not None:`` block of ``DistributedDataParallel.__init__``
    (and the ``p._idx`` that ``_ddp_init_helper`` gives the Reducer's parameters for it): the
    low-precision twins, the buffers cast, the root pre-hook and torch's comm hook
    (Note [Mixed precision stops at the first forward on CPU])."""
    for i, p in enumerate(params):
        p._idx = i  # the hook's index into the Reducer, as torch passes it from Python
    setup_mixed_precision_params(ddp.mixed_precision, ddp.module)
    cast_buffers(ddp.mixed_precision, ddp.module)
    ddp.mp_stream = torch.Stream()  # the side stream of the low-precision copies; fails on a CUDA build with no GPU
    ddp.module.register_forward_pre_hook(functools.partial(root_copy_hook, ddp), prepend=False, with_kwargs=True)
    state, hook = torchcompat.mixed_precision_upcast_hook(ddp)
    ddp.register_comm_hook(state, hook)
    # _set_mixed_precision_param_dtype: the dtype check_grad_layout expects (minddp/grad_checks.py)
    ddp.reducer.mixed_precision_param_dtype = ddp.mixed_precision.param_dtype


def cast_buffers(config, root_module) -> None:
    """Mirrors ``_cast_buffers``: every buffer to ``buffer_dtype`` (None keeps its dtype), but those DDP
    ignores (Note [Names DDP ignores] in minddp/construction.py)."""
    for buf in root_module.buffers():
        if torchcompat.is_ddp_ignored(buf):
            continue
        buf.data = buf.to(dtype=config.buffer_dtype)


def setup_mixed_precision_params(config, root_module) -> None:
    """Mirrors ``_setup_mixed_precision_params``: each parameter gets ``_mp_param``, zeros in
    ``param_dtype`` whose storage is freed at once (allocated again by each forward's copy), and
    ``_fp_param``, its full-precision data, to switch back to after the backward."""
    for param in root_module.parameters():
        if torchcompat.is_ddp_ignored(param):  # left in full precision, as torch leaves it
            continue
        if not hasattr(param, "_mp_param"):
            param._mp_param = torch.zeros_like(param, device=param.device, dtype=config.param_dtype,
                                               requires_grad=param.requires_grad)
            torchcompat.free_storage(param._mp_param)
            param._fp_param = param.data


def root_copy_hook(ddp, module, args, kwargs) -> None:
    """Mirrors ``_root_copy_hook`` (a forward pre-hook of the wrapped module): for each submodule,
    its parameters switch to their low-precision twins, then an event is recorded on the side
    stream. Without an accelerator the first ``record()`` raises torch's RuntimeError (Note [Mixed
    precision stops at the first forward on CPU]); past it, minddp does not follow torch."""
    with ddp.mp_stream:
        for submodule in ddp.module.modules():
            for param in submodule.parameters(recurse=False):
                if torchcompat.is_ddp_ignored(param):
                    continue
                torchcompat.alloc_storage(param._mp_param, param.size())
                with torch.no_grad():
                    param._mp_param.copy_(param.data)  # copy_ casts down
                    if param.grad is not None:  # an accumulated grad must match the low-precision one
                        param.grad.data = param.grad.to(ddp.mixed_precision.param_dtype)
                param.data = param._mp_param
            torch.Event().record()  # "cpu backend doesn't support events." without an accelerator
    raise NotImplementedError(NOT_MIRRORED)
