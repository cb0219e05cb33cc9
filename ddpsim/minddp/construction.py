"""What ``DistributedDataParallel.__init__`` (torch/nn/parallel/distributed.py, torch 2.13) decides
from its arguments before any Reducer exists: the names DDP leaves alone (Note [Names DDP
ignores]), which parameters DDP manages (``_build_params_for_reducer``), what it broadcasts
(``_sync_module_states``, ``_assign_modules_buffers``) and the buffer flags (Note [Two buffer flags])."""
from __future__ import annotations

import logging
import warnings

from torch import nn
from torch.nn.parameter import UninitializedParameter

from ddpsim import buckets, torchcompat

logger = logging.getLogger(__name__)

BROADCAST_BUCKET_BYTES = 250 * buckets.MIB  # distributed.py: self.broadcast_bucket_size
BOTH_BUFFER_FLAGS = ("Both `broadcast_buffers` and `forward_sync_buffers` were specified. `broadcast_buffers` is "
                     "deprecated and its value is ignored when `forward_sync_buffers` is provided.")
BROADCAST_BUFFERS_DEPRECATED = (
    "`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead. IMPORTANT: unlike "
    "`broadcast_buffers=False`, `forward_sync_buffers=False` still syncs buffers at init. If you rely on "
    "buffers NOT being synced at init (e.g. rank-local buffers), keep using `broadcast_buffers=False` until "
    "`init_sync_buffers` is available.")
DELAY_ARGUMENTS_TOGETHER = "delay_all_reduce_named_params and param_to_hook_all_reduce need to be set at the same time."
UNINITIALIZED = ("Modules with uninitialized parameters can't be used with `DistributedDataParallel`. "
                 "Run a dummy forward pass to correctly initialize the modules")
NOT_NEEDED = ("DistributedDataParallel is not needed when a module doesn't have any parameter that "
              "requires a gradient.")


def check_delay_arguments(delay_all_reduce_named_params, param_to_hook_all_reduce) -> None:
    """The first check of ``DistributedDataParallel.__init__``: the two delay arguments come together."""
    if (delay_all_reduce_named_params is not None) != (param_to_hook_all_reduce is not None):
        raise ValueError(DELAY_ARGUMENTS_TOGETHER)


def parameters_to_ignore(module: nn.Module, delay_all_reduce_named_params):
    """Mirrors ``parameters_to_ignore`` in ``DistributedDataParallel.__init__``, after the process group:
    returns (parameters_to_ignore, the delayed parameters). The delayed parameters' names join the ignored
    ones (Note [Delayed allreduce] in minddp/delayed.py).

    Note [Names DDP ignores]: ``_set_params_and_buffers_to_ignore_for_model(module, names)`` stores
    full names on the module; DDP then leaves those parameters out of its Reducer (no bucket, no
    allreduce: each rank keeps its own gradient) and leaves those parameters and buffers out of every
    broadcast. torch checks the names in two spellings: the broadcasts and the "not needed" check
    take ``named_parameters()``/``named_buffers()`` names ("w" for a parameter of the root module),
    the Reducer's list takes ``f"{module_name}.{param_name}"`` (".w" there). So a root-module
    parameter named in the list is not broadcast but is still reduced; one of a submodule
    ("lin.w") is neither. Measured on 2 gloo ranks (tests/test_minddp_ignored_params.py).
    """
    ignore, delayed = torchcompat.ddp_params_and_buffers_to_ignore(module), []
    for name, param in delay_all_reduce_named_params or ():
        ignore.add(name)
        delayed.append(param)
    return ignore, delayed


def module_parameters(module: nn.Module, ignore, delayed) -> list:
    """Mirrors ``self._module_parameters`` and the constructor's first check of it: torch's "not needed"
    RuntimeError when no parameter left requires a gradient and none is delayed (the device checks that
    follow: ``devices.place``)."""
    params = [p for n, p in module.named_parameters() if n not in ignore]
    if not any(p.requires_grad for p in params):
        if not delayed:
            raise RuntimeError(NOT_NEEDED)
        logger.info("Delay the AllReduce of all parameters.")  # torch's logger.info, same words
    return params


def check_initialized(params) -> None:
    """Mirrors the constructor's check for lazy modules' parameters (``nn.LazyLinear`` before its first
    forward): torch's RuntimeError, word for word."""
    if any(isinstance(p, UninitializedParameter) for p in params):
        raise RuntimeError(UNINITIALIZED)


def module_states(module: nn.Module, ignore, with_buffers: bool) -> list:
    """Mirrors the list ``_sync_module_states`` (distributed/utils.py) broadcasts: the parameters,
    then (``with_buffers``) the buffers, by ``named_parameters()``/``named_buffers()`` name, less
    the ignored ones (Note [Names DDP ignores])."""
    states = [p.detach() for n, p in module.named_parameters() if n not in ignore]
    return states + (modules_buffers(module, ignore) if with_buffers else [])


def modules_buffers(module: nn.Module, ignore) -> list:
    """Mirrors ``_assign_modules_buffers``: the buffers DDP broadcasts, less the ignored ones."""
    return [b for n, b in module.named_buffers() if n not in ignore]


def buffer_sync_flags(broadcast_buffers, forward_sync_buffers):
    """Mirrors the buffer flags of ``DistributedDataParallel.__init__`` (torch 2.13): returns
    (forward_sync_buffers, init_sync_buffers), with torch's FutureWarnings.

    Note [Two buffer flags]: ``broadcast_buffers=False`` meant no buffer broadcast at all, at
    construction nor before each forward. 2.13 deprecates it for ``forward_sync_buffers``, which
    governs only the broadcasts before each forward (and Join's final sync): buffers are always
    synced at construction then. Given both, ``forward_sync_buffers`` wins. ``None`` is not given.
    Measured on 2 gloo ranks with a buffer filled with the rank: broadcast_buffers=False leaves
    rank 1 its own buffer at construction, forward_sync_buffers=False gives it rank 0's.
    """
    if broadcast_buffers is not None:
        message = BROADCAST_BUFFERS_DEPRECATED if forward_sync_buffers is None else BOTH_BUFFER_FLAGS
        warnings.warn(message, FutureWarning, stacklevel=3)
    if forward_sync_buffers is not None:
        return bool(forward_sync_buffers), True
    effective = True if broadcast_buffers is None else bool(broadcast_buffers)
    return effective, effective


def build_params_for_reducer(module: nn.Module, parameters_to_ignore=None):
    """Mirrors ``DistributedDataParallel._build_params_for_reducer``.

    named_modules() x named_parameters(recurse=False), requires_grad only, less the ignored
    names (``parameters_to_ignore``; None: the module's own list, as torch's DDP reads it without
    delayed parameters; Note [Names DDP ignores]); a parameter shared by several modules (tied
    weights) counts once, under the name of its first module. Returns (params, names,
    expect_sparse_gradient).
    """
    if parameters_to_ignore is None:
        parameters_to_ignore = torchcompat.ddp_params_and_buffers_to_ignore(module)
    params, names, sparse, memo = [], [], [], set()
    for module_name, m in module.named_modules():
        for param_name, p in m.named_parameters(recurse=False):
            ignored = f"{module_name}.{param_name}" in parameters_to_ignore  # ".w" for the root's "w"
            if p.requires_grad and not ignored and p not in memo:
                memo.add(p)
                params.append(p)
                names.append(f"{module_name}.{param_name}" if module_name else param_name)
                sparse.append(isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse)
    return params, names, sparse
