"""Where a DDP runs: the device and process-group arguments of ``DistributedDataParallel.__init__``
(torch/nn/parallel/distributed.py, torch 2.13): ``process_group`` / ``device_mesh``,
``device_ids``, ``output_device``, ``dim`` and ``check_reduction``, checked and stored as torch
does, with torch's words.

Note [One device per DDP]: since torch 1.x a DDP drives one device per process (the one-process-
per-GPU layout). ``device_ids`` names that device, as a list of at most one element (a relic of the
single-process multi-GPU mode, now gone); it is used only for a module whose parameters all sit on
one GPU. For a CPU module, or a module spread over several devices, ``device_ids`` and
``output_device`` must be left out: torch raises a ValueError that names them and the parameters'
devices. With ``device_ids``, torch's ``_pre_forward`` moves the forward's inputs to
``device_ids[0]`` (``_to_kwargs``); nothing is scattered.

Note [dim is stored, not used]: ``dim`` was the input dimension to scatter along, in the old
single-process multi-GPU mode. In torch 2.13 only DDP's ``scatter`` and ``gather`` methods (kept
for backward compatibility, called by nothing in DDP) read ``self.dim``; ``_pre_forward`` moves
inputs whole (``_to_kwargs``, no dim) with ``device_ids`` and leaves them untouched without
(the CPU case). So ``dim`` changes no forward: minddp stores it and reads it nowhere.

Note [A device mesh gives the process group]: ``device_mesh`` replaces ``process_group``: DDP
reduces over the mesh's only dimension (``device_mesh.get_group(mesh_dim=0)``). A mesh of more
than one dimension is refused. A mesh sliced out of a larger one (``mesh_2d["dp"]``, data
parallel beside tensor parallel) makes torch first turn the module's DTensor parameters into
local tensors and hook the forward to turn them back (``_pre_dp_module_transform``, a workaround
for DDP + TP); minddp calls that same torch function. Run here with plain modules only (no
DTensor parameter, where it changes no number); a tensor-parallel module was not tried.
"""
from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist

from ddpsim import torchcompat
from ddpsim.minddp.logging_data import has_sync_bn

# distributed.py's messages (torch 2.13), word for word
TOO_MANY_DEVICE_IDS = "device_ids can only be None or contain a single element."
GROUP_AND_MESH = "Cannot specify both process_group and device_mesh arguments."
CHECK_REDUCTION_DEPRECATED = ("The `check_reduction` argument in `DistributedDataParallel` module is "
                              "deprecated. Please avoid using it.")


def set_process_group(ddp, process_group, device_mesh, module) -> None:
    """Mirrors the ``process_group`` / ``device_mesh`` branch of ``__init__`` (torch 2.13): sets
    ``ddp.process_group``, and ``ddp.device_mesh`` when a mesh is given (torch sets no
    ``device_mesh`` attribute otherwise). Note [A device mesh gives the process group]."""
    if process_group and device_mesh is not None:
        raise RuntimeError(GROUP_AND_MESH)
    if device_mesh is None:
        ddp.process_group = dist.group.WORLD if process_group is None else process_group
        return
    if device_mesh.ndim != 1:
        raise RuntimeError(f"Only 1D device mesh is supported, but got {device_mesh}.")
    ddp.device_mesh = device_mesh
    ddp.process_group = device_mesh.get_group(mesh_dim=0)
    if torchcompat.is_sliced_mesh(device_mesh):
        torchcompat.pre_dp_module_transform(module)


def place(ddp, params, device_ids, output_device, dim) -> None:
    """Mirrors the device checks of ``__init__`` (torch 2.13, Note [One device per DDP]): sets
    ``is_multi_device_module``, ``device_type``, ``device_ids`` and ``output_device`` (None unless a
    single-GPU module), ``dim`` (Note [dim is stored, not used]), ``device`` (the first
    parameter's) and ``use_side_stream_for_tensor_copies``. ``params``: the module's parameters less
    the ignored ones (``construction.module_parameters``, torch's ``_module_parameters``), after its
    check that some parameter requires a gradient, as torch does."""
    if device_ids is not None and len(device_ids) > 1:
        raise ValueError(TOO_MANY_DEVICE_IDS)
    ddp.is_multi_device_module = len({p.device for p in params}) > 1
    types = {p.device.type for p in params if p.device is not None}
    if len(types) != 1:
        raise ValueError("DistributedDataParallel's input module must be on the same type of devices, "
                         f"but input module parameters locate in {types}.")
    ddp.device_type = next(iter(types))
    if device_ids is None or len(device_ids) == 0 or ddp.device_type == "cpu" or ddp.is_multi_device_module:
        if device_ids or output_device:
            devices = {p.device for p in params}
            raise ValueError(
                "DistributedDataParallel device_ids and output_device arguments only work with "
                "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                f"{device_ids}, output_device {output_device}, and module parameters {devices}.")
        ddp.device_ids = ddp.output_device = None
    else:
        ddp.device_ids = [torchcompat.device_index(x) for x in device_ids]
        ddp.output_device = torchcompat.device_index(device_ids[0] if output_device is None else output_device)
    ddp.dim = dim
    ddp.device = params[0].device  # none: every parameter delayed, refused above (a set() of types)
    ddp.use_side_stream_for_tensor_copies = os.environ.get("PYTORCH_DDP_USE_SIDE_STREAM", "1") == "1"


def warn_check_reduction(check_reduction) -> None:
    """Mirrors ``check_reduction`` in ``__init__``: unused since the reducer finishes every reduction
    by itself; given True, torch's FutureWarning (after the buffer flags' warnings, as in torch)."""
    if check_reduction:
        warnings.warn(CHECK_REDUCTION_DEPRECATED, FutureWarning, stacklevel=3)


def move_inputs(ddp, inputs, kwargs):
    """Mirrors the ``device_ids`` branch of ``_pre_forward`` (torch 2.13): the forward's inputs go to
    ``device_ids[0]`` (Note [One device per DDP]); returns (inputs, kwargs)."""
    device = torch.device(ddp.device_type, ddp.device_ids[0])
    moved_inputs, moved_kwargs = torchcompat.to_kwargs(inputs, kwargs, device, ddp.use_side_stream_for_tensor_copies)
    return moved_inputs[0], moved_kwargs[0]


SYNC_BN_ON_CPU = "SyncBatchNorm layers only work with GPU modules"  # distributed.py (torch 2.13)


def passing_sync_batchnorm_handle(ddp) -> None:
    """Mirrors ``_passing_sync_batchnorm_handle``, the last step of ``_ddp_init_helper``: a SyncBatchNorm
    in a CPU module is refused, through ``_log_and_throw``, so the logging data keeps the error."""
    if ddp.device_type == "cpu" and has_sync_bn(ddp.module):
        ddp._log_and_throw(ValueError, SYNC_BN_ON_CPU)
