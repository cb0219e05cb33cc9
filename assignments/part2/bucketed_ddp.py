"""Part 2: an overlapping, bucketed DDP (starter file).

Read HANDOUT.md first. Fill in TODO 1-4; everything else is given. Grade yourself:

    python -m ddpsim.grade part2 assignments/part2/bucketed_ddp.py

The autograder trains a small model for 5 steps on 2 real gloo processes with your
BucketedDDP. It measures the overlap and the launch order itself (its own gradient hooks and a
wrapper around dist.all_reduce), and also checks the trace your code reports to ``recorder``
(a ddpsim.events.RankRecorder), which you can open in the dashboard.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddpsim.minddp import compute_bucket_assignment_by_size  # or your part 1 solution
from ddpsim.events import RankRecorder, now_ns

MB = 1024 * 1024
queue_callback = torch.autograd.Variable._execution_engine.queue_callback


def reducer_params(module: nn.Module) -> list[nn.Parameter]:
    """TODO 1: the parameters DDP reduces, in DDP's order (a list of nn.Parameter)."""
    # Walk module.named_modules(), and for each module m its m.named_parameters(recurse=False).
    # Keep a parameter only if p.requires_grad (a frozen parameter never gets a gradient,
    # so its hook never fires and its bucket would never launch). A parameter shared by
    # two modules (tied weights) must appear once: compare with `id(p)`, not ==.
    raise NotImplementedError("TODO 1: reducer_params(module) in bucketed_ddp.py")


class Bucket:
    """One flat gradient buffer, allreduced with one collective (given)."""

    def __init__(self, index: int, param_indices: list[int], params: list[nn.Parameter]):
        self.index = index
        self.param_indices = list(param_indices)
        members = [params[i] for i in self.param_indices]
        self.buffer = torch.zeros(sum(p.numel() for p in members), dtype=members[0].dtype)
        self.views, offset = [], 0  # views[k]: param_indices[k]'s slice, shaped like the param
        for p in members:
            self.views.append(self.buffer[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.pending = len(self.param_indices)  # gradients still missing this iteration
        self.future = None  # the allreduce's future, once launched

    @property
    def nbytes(self) -> int:
        return self.buffer.numel() * self.buffer.element_size()

    def describe(self) -> dict:
        return {"index": self.index, "params": self.param_indices, "bytes": self.nbytes,
                "cap_bytes": None}


class BucketedDDP(nn.Module):
    def __init__(self, module: nn.Module, bucket_cap_mb: float = 25.0,
                 recorder: RankRecorder | None = None, process_group=None):
        super().__init__()
        self.module = module
        self.group = process_group or dist.group.WORLD
        self.world_size = dist.get_world_size(self.group)
        self.recorder = recorder
        self.params = reducer_params(module)
        # Every rank starts from rank 0's weights and buffers (given).
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, 0, group=self.group)
        # Buckets by size in definition order, then reversed: bucket 0 holds the
        # last-defined parameters, whose gradients are ready first (given).
        groups, _ = compute_bucket_assignment_by_size(self.params, [int(bucket_cap_mb * MB)])
        self.buckets = [Bucket(b, idx, self.params) for b, idx in enumerate(reversed(groups))]
        self.locator = {}  # param index -> (bucket, position in bucket)
        for bucket in self.buckets:
            for k, i in enumerate(bucket.param_indices):
                self.locator[i] = (bucket, k)
        if recorder is not None:
            recorder.set_layout(0, "construction", [b.describe() for b in self.buckets])
        self.next_bucket = 0  # the next bucket to launch
        self.finalize_queued = False
        self.hooks = self.register_hooks()

    def forward(self, *inputs, **kwargs):
        self.prepare_for_backward()
        return self.module(*inputs, **kwargs)

    def prepare_for_backward(self):
        """Reset the per-iteration state (given)."""
        self.next_bucket = 0
        self.finalize_queued = False
        for bucket in self.buckets:
            bucket.pending = len(bucket.param_indices)
            bucket.future = None

    def recording(self) -> bool:
        return self.recorder is not None and self.recorder.iteration is not None

    # -- TODO 2: hooks ---------------------------------------------------------------
    def register_hooks(self) -> list:
        """One hook per parameter in self.params; returns the hook handles.

        Use p.register_post_accumulate_grad_hook(fn): fn(p) runs right after p.grad has
        been accumulated in backward. Call self.on_grad_ready(i) from it, i being p's index
        (careful with lambdas in a loop: bind i as a default argument).
        """
        raise NotImplementedError("TODO 2a: register_hooks() in bucketed_ddp.py")

    def on_grad_ready(self, index: int) -> None:
        """Parameter ``index`` has its gradient in self.params[index].grad.

        1. If self.recording(): self.recorder.grad_ready(index, now_ns()).
        2. On the first hook of this backward (not self.finalize_queued): set the flag and
           queue_callback(self.finalize), so finalize runs when the whole backward is over.
        3. Copy grad / world_size into the parameter's view in its bucket
           (bucket, k = self.locator[index]; bucket.views[k]).
        4. bucket.pending -= 1; when it reaches 0, self.mark_bucket_ready(bucket.index).
        """
        raise NotImplementedError("TODO 2b: on_grad_ready(index) in bucketed_ddp.py")

    # -- TODO 3: in-order launch -----------------------------------------------------
    def mark_bucket_ready(self, bucket_index: int) -> None:
        """Bucket ``bucket_index`` has all its gradients. Launch in bucket order only:
        every rank must issue the same collectives in the same order. Starting at
        self.next_bucket, launch each bucket whose pending count is 0 (self.launch) and
        advance self.next_bucket; stop at the first bucket that is not ready yet."""
        raise NotImplementedError("TODO 3a: mark_bucket_ready(bucket_index) in bucketed_ddp.py")

    def launch(self, bucket: Bucket) -> None:
        """Start the bucket's allreduce without waiting for it.

        t = now_ns(); work = dist.all_reduce(bucket.buffer, group=self.group, async_op=True);
        bucket.future = work.get_future(). If self.recording(): report it with
        event = self.recorder.bucket_launch(bucket.index, bucket.param_indices, bucket.nbytes, t)
        and chain the completion time: bucket.future = bucket.future.then(
            lambda fut: RankRecorder.bucket_complete(event, now_ns())).
        """
        raise NotImplementedError("TODO 3b: launch(bucket) in bucketed_ddp.py")

    # -- TODO 4: finalize -----------------------------------------------------------
    def finalize(self) -> None:
        """Runs once backward is over (queued in on_grad_ready).

        If a parameter got no gradient in this backward (not used in the forward: its bucket
        never filled, so self.next_bucket != number of buckets), raise a RuntimeError whose
        message names every parameter that got no gradient, each by its index in self.params
        (or by its name, as self.module.named_parameters() gives it): note in on_grad_ready
        which indices came (e.g. a set, emptied on the first hook). Otherwise wait for each
        bucket's future and copy every view back into its parameter's .grad
        (self.params[i].grad.copy_(view)): the averaged gradient. Reset finalize_queued.
        """
        raise NotImplementedError("TODO 4: finalize() in bucketed_ddp.py")
