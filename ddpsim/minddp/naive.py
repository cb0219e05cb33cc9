"""NaiveDDP: data parallelism without buckets and without overlap, for contrast.

What it does, and what torch DDP does instead:
- backward runs to the end untouched (a post-accumulate-grad hook only timestamps
  each gradient); DDP starts allreducing buckets while backward still runs;
- then, in a callback queued on the autograd engine (so it runs as the last step of
  ``loss.backward()``), it allreduces every parameter's gradient separately and
  waits for each before launching the next: one small collective per parameter,
  each paying the full latency; DDP packs gradients into ~25 MiB buckets.
- the order is fixed, last-defined parameter first, identical on every rank.

Recording: each parameter is its own "bucket"; bucket k (= k-th launch) holds
parameter ``n-1-k``. A parameter with no gradient on a rank contributes zeros and
always receives the averaged gradient (torch DDP with find_unused_parameters keeps
a globally unused parameter's ``.grad`` untouched; with plain SGD both give the same
update).
"""
from __future__ import annotations

import weakref
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn

from ddpsim import torchcompat
from ddpsim.minddp import devices
from ddpsim.minddp.construction import (BROADCAST_BUCKET_BYTES, build_params_for_reducer, module_parameters,
                                        module_states, modules_buffers)
from ddpsim.events import now_ns


class NaiveDDP(nn.Module):
    """Same constructor as ``minddp.DistributedDataParallel``: the process group or device mesh,
    ``device_ids``, ``output_device``, ``dim`` and ``check_reduction`` are checked and used as there
    (minddp/devices.py); the bucket and buffer options are accepted and ignored (parameters and
    buffers are always broadcast from rank 0 at construction, buffers before each forward);
    ``mixed_precision`` and the delayed allreduce are refused. The names the module's
    ``_set_params_and_buffers_to_ignore_for_model`` list holds are left alone, as torch's DDP does
    (Note [Names DDP ignores] in minddp/construction.py)."""

    def __init__(self, module, bucket_cap_mb=None, find_unused_parameters=False,
                 static_graph=False, gradient_as_bucket_view=False, process_group=None,
                 recorder=None, bucket_order=None, broadcast_buffers=None, bucket_cap_mb_list=None,
                 skip_all_reduce_unused_params=False, forward_sync_buffers=None, batched_grad_copy=False,
                 init_sync=True, device_ids=None, output_device=None, dim=0, check_reduction=False, device_mesh=None,
                 mixed_precision=None, delay_all_reduce_named_params=None, param_to_hook_all_reduce=None):
        super().__init__()
        for name, given in (("mixed_precision", mixed_precision), ("delay_all_reduce_named_params",
                            delay_all_reduce_named_params), ("param_to_hook_all_reduce", param_to_hook_all_reduce)):
            if given is not None:
                raise ValueError(f"{type(self).__name__} has no {name}: use minddp's DistributedDataParallel")
        devices.set_process_group(self, process_group, device_mesh, module)
        self.ignored = torchcompat.ddp_params_and_buffers_to_ignore(module)  # left alone, as torch's DDP does
        devices.place(self, module_parameters(module, self.ignored, []), device_ids, output_device, dim)
        devices.warn_check_reduction(check_reduction)
        self.module = module
        self.world_size = dist.get_world_size(self.process_group)
        self.recorder = recorder
        self.require_backward_grad_sync = True
        self.params, self.param_names, _ = build_params_for_reducer(module, self.ignored)
        self.launch_order = list(reversed(range(len(self.params))))
        self._sync(module_states(module, self.ignored, with_buffers=False))
        self._queued = self._syncing = False
        me = weakref.ref(self)
        self.hooks = [p.register_post_accumulate_grad_hook(
            lambda p, i=i: me() is not None and me().grad_ready(i))
            for i, p in enumerate(self.params)]
        if recorder is not None:
            recorder.set_layout(0, "construction", [
                {"index": k, "params": [i], "bytes": self.params[i].numel()
                 * self.params[i].element_size(), "cap_bytes": None}
                for k, i in enumerate(self.launch_order)])

    def _sync(self, extra=()):
        """Broadcast rank 0's parameters (construction) and buffers (each forward), less the ones the
        module's ``_set_params_and_buffers_to_ignore_for_model`` list names (Note [Names DDP ignores]
        in minddp/construction.py)."""
        tensors = list(extra) + modules_buffers(self.module, self.ignored)
        if tensors:
            with torch.no_grad():
                torchcompat.broadcast_coalesced(self.process_group, tensors,
                                                BROADCAST_BUCKET_BYTES, 0)

    @contextmanager
    def no_sync(self):
        old, self.require_backward_grad_sync = self.require_backward_grad_sync, False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def forward(self, *inputs, **kwargs):
        self._sync()
        self._syncing = torch.is_grad_enabled() and self.require_backward_grad_sync
        if self.device_ids:  # a single-GPU module: as minddp (Note [One device per DDP] in minddp/devices.py)
            inputs, kwargs = devices.move_inputs(self, inputs, kwargs)
        return self.module(*inputs, **kwargs)

    def grad_ready(self, index):
        """Hook: timestamp the gradient; on the first one, queue the allreduces."""
        if not self._syncing:
            return
        if self.recorder is not None and self.recorder.iteration is not None:
            self.recorder.grad_ready(index, now_ns())
        if not self._queued:
            self._queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self.all_reduce_grads)

    def all_reduce_grads(self):
        """After backward: one blocking allreduce per parameter, in launch order."""
        self._queued = False
        rec = self.recorder if self.recorder is not None \
            and self.recorder.iteration is not None else None
        for k, i in enumerate(self.launch_order):
            p = self.params[i]
            grad = p.grad if p.grad is not None else torch.zeros_like(p)
            grad.mul_(1.0 / self.world_size)  # divide first, like DDP's bucket copy
            start = now_ns()
            dist.all_reduce(grad, group=self.process_group)
            if rec is not None:
                ev = rec.bucket_launch(k, [i], grad.numel() * grad.element_size(), start)
                rec.bucket_complete(ev, now_ns())
            p.grad = grad
