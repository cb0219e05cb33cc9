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
from ddpsim.minddp.construction import BROADCAST_BUCKET_BYTES, build_params_for_reducer, module_states, modules_buffers
from ddpsim.events import now_ns


class NaiveDDP(nn.Module):
    """Same constructor as ``minddp.DistributedDataParallel``; bucket options are ignored."""

    def __init__(self, module, bucket_cap_mb=None, find_unused_parameters=False,
                 static_graph=False, gradient_as_bucket_view=False, process_group=None,
                 recorder=None):
        super().__init__()
        self.module = module
        self.process_group = process_group or dist.group.WORLD
        self.world_size = dist.get_world_size(self.process_group)
        self.recorder = recorder
        self.require_backward_grad_sync = True
        self.ignored = torchcompat.ddp_params_and_buffers_to_ignore(module)  # left alone, as torch's DDP does
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
