"""A model's parameters without running it: names, shapes and torch's gradient-ready order.

``import PROFILE... --model path.py:factory`` needs the sizes a profile taken without
``record_shapes`` leaves out. The user's factory (the one ``record`` takes) is built on the
``meta`` device: tensors there have shapes and dtypes but no memory, so even a model larger
than this machine's memory costs nothing, and no data is read.

Note [The gradient-ready order from a meta backward]: the order DDP sees gradients become
ready is the order the autograd engine runs the ``AccumulateGrad`` nodes. On one device the
engine takes ready nodes by their sequence number (a node created later in the forward runs
first), whatever the device, so one forward and backward on ``meta`` tensors, with a
``post_accumulate_grad`` hook on every parameter, gives the order a GPU run has. When some op
has no meta kernel, the order falls back to the reverse of ``model.parameters()``, which is
the order DDP itself assumes before its first backward (``_build_params_for_reducer``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ddpsim.models import ModelSpecError, build_workload, call_batch

META_BATCH = 2  # samples on the meta device: BatchNorm refuses 1 in training mode; costs nothing


@dataclass
class ModelParams:
    """The parameters DDP would reduce, in ``model.parameters()`` order (DDP's index)."""

    spec: str
    params: list[dict]  # {"index", "name", "shape", "dtype", "bytes"}
    ready_order: list[int]  # DDP indices, in the order their gradients become ready
    notes: list[str] = field(default_factory=list)


def model_params(spec: str) -> ModelParams:
    """The trainable parameters of ``spec``'s model, built on the meta device (see module doc)."""
    import torch

    try:
        with torch.device("meta"):
            training = build_workload(spec)
    except ModelSpecError:
        raise
    except Exception as e:  # the user's factory: one line, no traceback
        raise ModelSpecError(f"could not build {spec} on the meta device: {type(e).__name__}: {e}") from None
    named = [(n, p) for n, p in training.model.named_parameters() if p.requires_grad]
    if not named:
        raise ModelSpecError(f"the model of {spec} has no parameters that require gradients")
    params = [{"index": i, "name": n, "shape": list(p.shape), "dtype": str(p.dtype).removeprefix("torch."),
               "bytes": p.numel() * p.element_size()} for i, (n, p) in enumerate(named)]
    out = ModelParams(spec, params, list(reversed(range(len(params)))))
    try:
        out.ready_order = _meta_ready_order(training, [p for _, p in named])
    except Exception as e:  # an op without a meta kernel, a batch function that needs data, ...
        out.notes.append(f"gradient-ready order: the reverse of model.parameters() (a meta backward "
                         f"failed: {type(e).__name__})")
    return out


def _meta_ready_order(training, params) -> list[int]:
    """The order ``AccumulateGrad`` runs in one meta forward and backward (Note [The
    gradient-ready order from a meta backward])."""
    import torch

    order: list[int] = []
    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i))
               for i, p in enumerate(params)]
    try:
        inputs, target = call_batch(training, 0, 0, 1, META_BATCH)
        inputs = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs)
        target = target.to("meta") if isinstance(target, torch.Tensor) else target
        training.loss(training.model(*inputs), target).backward()
    finally:
        for h in handles:
            h.remove()
    if sorted(order) != list(range(len(params))):
        raise RuntimeError("not every parameter got a gradient")
    return order
