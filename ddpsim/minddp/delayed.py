"""Delayed allreduce: torch 2.13 DDP's ``delay_all_reduce_named_params`` and
``param_to_hook_all_reduce`` (torch/nn/parallel/distributed.py), outside the Reducer.

Note [Delayed allreduce]: the named parameters join the names DDP ignores (Note [Names DDP
ignores] in minddp/construction.py), so the Reducer never sees them. Instead their gradients live
in one flat buffer: at the end of each forward, a delayed parameter whose ``.grad`` is None gets a
view of that buffer as its ``.grad`` (``_clear_grad_buffer``), so autograd accumulates into the
buffer in place. A tensor hook on ``param_to_hook_all_reduce`` fires when that parameter's gradient
is computed (before it is accumulated) and divides the buffer by the world size, then starts an
async allreduce of it that torch never waits for. So:

- the gradients are the buffer: nothing is copied back into ``.grad`` (the views are the ``.grad``);
- they come out averaged only if every delayed gradient was accumulated before the hook fired
  (e.g. delayed parameters of layers after the hooked one: autograd computes theirs first), and
  only once the allreduce has finished (a later collective on the group that waits for earlier
  work, such as gloo's barrier, does). Otherwise the allreduce races with the accumulation.
  Measured on 2 gloo ranks: delayed parameters of the first layer, hooked on the last layer's
  weight, gave gradients that differed across ranks and from one run to the next (by hand, not a
  test); those of the last layer hooked on the first layer's weight, read after a barrier, the
  average, bit for bit the same in torch and minddp (tests/test_minddp_ignored_params.py).

Note [All parameters delayed]: when no parameter left to DDP requires a gradient, torch 2.13's
constructor broadcasts the delayed parameters, sets up the hook, and returns before building a
Reducer, before broadcasting anything else (buffers stay each rank's own) and before setting
``_lazy_init_ran``, which its ``_pre_forward`` reads first: so the first forward raises an
AttributeError. minddp does the same. When no parameter is left at all (every parameter delayed, no
frozen one), torch's device check finds no device and raises its ValueError first. A delayed
root-module parameter ("w", spelled ".w" here: Note [Names DDP ignores]) still counts as left to DDP.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ddpsim import torchcompat

# what torch 2.13's first forward raises after Note [All parameters delayed]
ALL_DELAYED_FORWARD = "'DistributedDataParallel' object has no attribute '_lazy_init_ran'"


class DelayedAllReduceDDP:
    """The delayed allreduce of ``ddpsim.minddp.DistributedDataParallel`` (Note [Delayed allreduce]).
    Expects ``process_group``, ``module``, ``parameters_to_ignore`` and ``delay_all_reduce_params``."""

    def register_delay_all_reduce_hook(self, bucket_cap_mb: int, param_to_hook_all_reduce, device_ids) -> bool:
        """Mirrors ``_register_delay_all_reduce_hook``; returns ``delay_all_reduce_all_params`` (Note [All
        parameters delayed]). ``bucket_cap_mb``: torch passes the cap in whole MiB
        (``_BucketCapacityConfig.bucket_cap_mb``) where ``_broadcast_coalesced`` takes bytes; only the number
        of broadcasts depends on it. ``device_ids``: the constructor's argument, as torch reads it."""
        device = torch.device("cpu") if device_ids is None else device_ids[0]
        self.delay_grad_buffer = torch.zeros(sum(p.numel() for p in self.delay_all_reduce_params), device=device)
        detached = [p.detach() for p in self.delay_all_reduce_params]  # sent even with init_sync=False
        torchcompat.broadcast_coalesced(self.process_group, detached, bucket_cap_mb, 0)
        param_to_hook_all_reduce.register_hook(self.delayed_all_reduce_hook)
        offset = 0
        for param in self.delay_all_reduce_params:
            self.delay_grad_views.append(self.delay_grad_buffer[offset:offset + param.numel()].view(param.shape))
            offset += param.numel()
        for module_name, module in self.module.named_modules():  # the Reducer's spelling: ".w" for the root's "w"
            for param_name, param in module.named_parameters(recurse=False):
                if param.requires_grad and f"{module_name}.{param_name}" not in self.parameters_to_ignore:
                    return False
        self.delay_all_reduce_all_params = True
        return True

    def delayed_all_reduce_hook(self, grad):
        """Mirrors ``_delayed_all_reduce_hook``: divide the whole buffer by the world size and start
        its allreduce, not waited for (Note [Delayed allreduce]); the hooked gradient passes unchanged."""
        self.delay_grad_buffer.div_(dist.get_world_size(self.process_group))
        dist.all_reduce(self.delay_grad_buffer, group=self.process_group, async_op=True)
        return grad

    def clear_grad_buffer(self) -> None:
        """Mirrors ``_clear_grad_buffer`` (end of ``_post_forward``): each delayed parameter without a
        ``.grad`` gets its view of the buffer; when none had one, the whole buffer is zeroed at once."""
        if self.delay_grad_buffer is None:
            return
        all_param_grad_none = all(p.grad is None for p in self.delay_all_reduce_params)
        for index, param in enumerate(self.delay_all_reduce_params):
            if param.grad is None:
                param.grad = self.delay_grad_views[index]
                if not all_param_grad_none:
                    param.grad.zero_()
        if all_param_grad_none:
            self.delay_grad_buffer.zero_()
