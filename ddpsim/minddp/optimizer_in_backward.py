"""The optimizer run inside the backward, in the readable DDP: ``_apply_optimizer_in_backward``
before DDP (``_lazy_init``, ``_setup_in_backward_optimizers``) and ``_register_fused_optim``
(torch/nn/parallel/distributed.py, torch 2.13), with torch's own comm hooks
(torch/distributed/algorithms/ddp_comm_hooks/optimizer_overlap_hooks.py).

Note [The optimizer in the backward]: a plain step waits for the whole backward, then updates
every parameter. These two private torch APIs update each parameter as soon as its bucket's
allreduce is done, inside the comm hook, so the optimizer's work overlaps the allreduces of the
buckets after it. Both go through DDP's one comm hook (``register_comm_hook``), so neither composes
with a hook of the user's: the second registration fails ("... can only be called once.").

- ``torch.distributed.optim._apply_optimizer_in_backward(cls, params, kwargs)`` gives each
  parameter its own optimizer (``param._in_backward_optimizers``) and a hook on its AccumulateGrad
  that steps it. Under DDP that hook must not fire (the gradient there is the local one), so at
  the first forward (``_lazy_init``: not at construction, so a call between construction and the
  first forward counts too) DDP removes those hooks and registers torch's
  ``_apply_optim_in_backward_hook``: allreduce the bucket (a sum: ``reducer._run_allreduce_hook``),
  wait, divide it by the group size, point each such parameter's ``.grad`` at its slice of the
  bucket, step its optimizers; and queue, once per backward, a callback that waits for the
  optimizer's stream (``torch.accelerator.current_stream()``) and sets those ``.grad`` to None.
  The reducer is told (``_set_optimizer_in_backward``) not to write ``.grad`` at the end.
- ``ddp._register_fused_optim(cls, *args, optim_params=None, **kwargs)``: ``cls``'s functional
  twin (``torch.distributed.optim``'s ``_FunctionalSGD``...; a ValueError for a class without one)
  steps each parameter (only those of ``optim_params`` when given) in a ``.then`` after torch's
  ``allreduce_hook`` (``_hook_then_optimizer``); the reducer writes ``.grad`` as usual, and the
  user zeroes it (nothing does it for them).

Note [The optimizer in the backward needs an accelerator]: measured on 2 gloo CPU ranks without
an accelerator (tests/test_minddp_optimizer_in_backward.py), torch's ``_apply_optimizer_in_backward``
under DDP cannot train: the callback's ``torch.accelerator.current_stream()`` raises "Cannot access
accelerator device when none is available." at the end of the first synced backward, after every
optimizer has stepped and each ``.grad`` points at its averaged bucket. The reducer's own
``finalize_backward``, queued after that callback, never runs, so the next forward fails in
``rebuild_buckets`` (``ensure_prior_reduction_finished``: every parameter was marked ready, yet the
backward was not finalized: an internal assert), and so does every forward after it. On a CUDA
build of torch with no usable GPU (torch 2.14.1's CUDA 13 wheel, no driver) it stops earlier: the
first forward's ``_lazy_init`` builds torch's hook, whose ``torch.Stream()`` raises
``AcceleratorError`` after the parameters' own hooks were removed and before DDP registers its hook,
so every forward fails there and nothing is stepped. minddp runs torch's own hook, so it fails the
same way on either build. ``_register_fused_optim`` needs no stream and trains.
"""
from __future__ import annotations

import weakref

from ddpsim import torchcompat
from ddpsim.minddp import comm_hook


class DDPSeenByTorchHook:
    """What torch's ``_apply_optim_in_backward_hook`` reads of its DDP, through the weakref it gets
    as its state: ``reducer._run_allreduce_hook(bucket)``, ``process_group``, ``module`` and
    ``_get_data_parallel_params(module)``. Those are torch's private names; minddp's DDP and Reducer
    keep their own names, and this object answers to torch's (it is its own ``reducer``)."""

    def __init__(self, ddp):
        self.ddp = weakref.ref(ddp)  # torch's hook holds a weakref: it must not keep the DDP alive
        self.reducer = self

    @property
    def process_group(self):
        return self.ddp().process_group

    @property
    def module(self):
        return self.ddp().module

    def _run_allreduce_hook(self, bucket):
        """``Reducer::run_allreduce_hook``: ``comm_hook.run_allreduce_hook``, a sum."""
        return comm_hook.run_allreduce_hook(self.ddp().process_group, bucket)

    @staticmethod
    def _get_data_parallel_params(module, named_params=False):
        """Mirrors ``DistributedDataParallel._get_data_parallel_params``: the parameters (or
        (name, parameter) pairs) not marked ``_ddp_ignored``."""
        for param in module.named_parameters() if named_params else module.parameters():
            if not torchcompat.is_ddp_ignored(param[1] if named_params else param):
                yield param


def lazy_init(ddp) -> None:
    """Mirrors ``_lazy_init`` (distributed.py, torch 2.13), which ``_pre_forward`` runs until it
    has once run to the end: a failure (a comm hook already there) fails every forward."""
    setup_in_backward_optimizers(ddp)
    ddp.lazy_init_ran = True


def setup_in_backward_optimizers(ddp) -> None:
    """Mirrors ``_setup_in_backward_optimizers`` (distributed.py, torch 2.13): Note [The optimizer
    in the backward]. Over ``_module_parameters``: the parameters DDP does not ignore (Note [Names DDP
    ignores] in minddp/construction.py); an ignored one keeps its own optimizer hook."""
    params = ddp.module_parameters
    if not any(torchcompat.has_in_backward_optimizers(p) for p in params):
        return
    for p in params:  # the AccumulateGrad hooks of _apply_optimizer_in_backward: DDP steps instead
        for handle in torchcompat.optim_hook_handles(p):
            handle.remove()
    view = ddp.in_backward_hook_view = DDPSeenByTorchHook(ddp)  # kept alive here; torch's hook gets a weakref
    ddp.register_comm_hook(weakref.ref(view),
                           torchcompat.apply_optim_in_backward_hook(ddp.reducer.gradient_as_bucket_view))
    ddp.reducer.optim_in_backward = True  # Reducer::set_optimizer_in_backward


def register_fused_optim(ddp, optim, *args, optim_params=None, **kwargs) -> None:
    """Mirrors ``DistributedDataParallel._register_fused_optim`` (distributed.py, torch 2.13):
    torch's ``_as_overlapped_optim(optim, optim_params, ...).register_ddp(ddp)``, which registers
    ``_hook_then_optimizer(allreduce_hook, state)`` through ``ddp.register_comm_hook`` (minddp's
    here: Note [The optimizer in the backward])."""
    overlapped = torchcompat.as_overlapped_optim(optim, optim_params, *args, **kwargs)
    try:
        overlapped.register_ddp(ddp)
    except NotImplementedError as e:
        raise RuntimeError(f"{optim} does not support overlapped DDP. Please file an issue to PyTorch or the "
                           f"respective owner of {optim}.") from e
