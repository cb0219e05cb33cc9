"""Uneven inputs: DDP's side of torch's ``Join`` (torch/nn/parallel/distributed.py, torch 2.13:
``_DDPJoinHook``, ``join``, ``_match_all_reduce_for_bwd_pass`` and their helpers). The context
manager itself is torch's own (``torch.distributed.algorithms.join.Join``): it is generic, and
minddp plugs into it exactly as torch's DDP does, as a ``Joinable``.

Note [Join]: every DDP iteration issues collectives (the bucket allreduces, the buffer broadcast,
the rebuild's broadcast), and a collective completes only when every rank joins it. A rank whose
data runs out stops issuing them and the others hang. Inside ``with model.join():`` a rank that
has run out *joins*: it leaves its loop and, in ``Join.__exit__``, shadows each iteration the
others still run (``_DDPJoinHook.main_hook``): the same collectives in the same order, with zeros
for gradients. Each non-joined rank's forward starts with an allreduce of ones
(``Join.notify_join_context``) that a joined rank matches with zeros, so its sum is the number of
ranks still training; the loop ends when it is 0. Zeros add nothing to the sum of gradients, so
the mean is taken over the initial world size (``divide_by_initial_world_size=True``, torch's
default), or, with False, over the ranks still training (the reducer waits for that allreduce's
result at its first gradient: ``Reducer.mark_variable_ready``). At the end every rank takes the
model of the last rank to join (``_sync_final_model``).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join, Joinable, JoinHook

from ddpsim import torchcompat
from ddpsim.events import RankRecorder, now_ns
from ddpsim.minddp.construction import module_states


class _DDPJoinHook(JoinHook):
    """Mirrors ``_DDPJoinHook``: what a joined rank does for each iteration the others still run."""

    def __init__(self, ddp, divide_by_initial_world_size):
        ddp.logger.set_uneven_input_join()  # the logging data's join_uneven_inputs
        self.ddp = ddp
        self.ddp.divide_by_initial_world_size = divide_by_initial_world_size
        super().__init__()

    def main_hook(self):
        """Mirrors ``_DDPJoinHook.main_hook``: shadow the forward's and the backward's collectives."""
        ddp = self.ddp
        ddp.reducer.rebuild_buckets()  # the rebuild's broadcast, if the others rebuild now
        ddp.check_and_sync_module_buffers()
        should_sync_backwards = ddp.check_global_requires_backward_grad_sync(is_joined_rank=True)
        ddp.require_forward_param_sync = should_sync_backwards
        if not should_sync_backwards:  # the others run a no_sync() step: nothing to match
            return
        ddp.match_all_reduce_for_bwd_pass()
        if ddp.find_unused_parameters:
            ddp.match_unused_params_allreduce()
        ddp.reducer.push_rebuilt_params_for_all_indices()

    def post_hook(self, is_last_joiner: bool):
        """Mirrors ``_DDPJoinHook.post_hook``."""
        self.ddp.sync_final_model(is_last_joiner)


class JoinableDDP(Joinable):
    """The methods of torch's ``DistributedDataParallel`` that ``Join`` and ``_DDPJoinHook`` call."""

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """Mirrors ``DistributedDataParallel.join``: ``with model.join(): for batch in mine: ...``."""
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, **kwargs):
        """Mirrors ``DistributedDataParallel.join_hook``."""
        return _DDPJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self):
        return self.device  # the first parameter's device (``place`` in minddp/devices.py), as torch's

    @property
    def join_process_group(self):
        return self.process_group

    def check_global_requires_backward_grad_sync(self, is_joined_rank):
        """Mirrors ``_check_global_requires_backward_grad_sync``: 1 from each rank that will reduce
        gradients this iteration, 0 from a joined rank; the joined rank waits for the sum."""
        syncing = not is_joined_rank and self.require_backward_grad_sync
        flag = torch.ones(1, device=self.join_device) if syncing else torch.zeros(1, device=self.join_device)
        work = dist.all_reduce(flag, group=self.process_group, async_op=True)
        if not is_joined_rank:
            return None  # a matching allreduce; the training rank does not wait for it
        work.wait()
        return flag.item() != 0

    def check_and_sync_module_buffers(self):
        """Mirrors ``_check_and_sync_module_buffers``: the joined rank's side of ``sync_buffers``."""
        if self.will_sync_module_buffers():
            self.sync_module_buffers(self.find_common_rank(dist.get_rank(self.process_group), False))

    def find_common_rank(self, input_rank, rank_cond):
        """Mirrors ``_find_common_rank``: the largest rank whose ``rank_cond`` holds."""
        rank_to_use = torch.tensor([input_rank if rank_cond else -1], device=self.join_device)
        dist.all_reduce(rank_to_use, op=dist.ReduceOp.MAX, group=self.process_group)
        if rank_to_use.item() == -1:
            self._log_and_throw(ValueError, "BUG! Expected rank_cond to be true for at least one process."
                                            " This indicates a bug in PyTorch, please report an issue.")
        return int(rank_to_use.item())

    def match_all_reduce_for_bwd_pass(self):
        """Mirrors ``_match_all_reduce_for_bwd_pass``: one allreduce of zeros per bucket, in bucket
        order (the reducer's, so a rebuilt layout is matched too), through ``run_comm_hook``."""
        rec = self.recorder if self.recorder is not None and self.recorder.iteration is not None else None
        works = []
        for grad_bucket in self.reducer.get_zeros_like_grad_buckets():
            launch = now_ns()
            future = self.reducer.run_comm_hook(grad_bucket)  # the user's hook too, if registered
            if rec is not None:
                bucket = self.reducer.buckets[grad_bucket.index()]
                ev = rec.bucket_launch(bucket.index, bucket.variable_indices, bucket.nbytes, launch)
                future = future.then(lambda fut, ev=ev: RankRecorder.bucket_complete(ev, now_ns()))
            works.append(future)
        for work in works:
            work.wait()

    def match_unused_params_allreduce(self):
        """Mirrors ``_match_unused_params_allreduce``: the used-parameter bitmap as ``_get_local_used_map``
        gives it, the device map (``local_used_map_dev_``), which still holds the map last summed
        across ranks (finalize_backward zeroes only the host map), reduced in place. So a joined rank
        counts as using what every rank used last, and those parameters keep zero gradients the
        optimizer acts on (weight decay, momentum), as in torch, instead of no gradient."""
        dist.all_reduce(self.reducer.local_used_tensor, group=self.process_group)

    def sync_final_model(self, is_last_joiner):
        """Mirrors ``_sync_final_model``: every rank takes the model (and buffers) of the last rank
        to join (the largest such rank when several joined last)."""
        src = self.find_common_rank(dist.get_rank(self.process_group), is_last_joiner)
        tensors = module_states(self.module, self.parameters_to_ignore, self.forward_sync_buffers)
        torchcompat.broadcast_coalesced(self.process_group, tensors, self.broadcast_bucket_size, src)
