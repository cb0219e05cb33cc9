# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Part 2 reference solution: an overlapping, bucketed DDP (instructors only).

The starter (assignments/part2/bucketed_ddp.py) is this file with the TODO bodies removed.
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
    """TODO 1: the parameters DDP reduces, in DDP's order."""
    seen, params = set(), []
    for _, m in module.named_modules():
        for _, p in m.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:  # frozen: skip; tied: once
                seen.add(id(p))
                params.append(p)
    return params


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
        return [p.register_post_accumulate_grad_hook(lambda p, i=i: self.on_grad_ready(i))
                for i, p in enumerate(self.params)]

    def on_grad_ready(self, index: int) -> None:
        if self.recording():
            self.recorder.grad_ready(index, now_ns())
        if not self.finalize_queued:  # runs once the whole backward is over
            self.finalize_queued = True
            self.got_grad = set()  # the parameters whose gradient came in this backward
            queue_callback(self.finalize)
        self.got_grad.add(index)
        bucket, k = self.locator[index]
        torch.mul(self.params[index].grad, 1.0 / self.world_size, out=bucket.views[k])
        bucket.pending -= 1
        if bucket.pending == 0:
            self.mark_bucket_ready(bucket.index)

    # -- TODO 3: in-order launch -----------------------------------------------------
    def mark_bucket_ready(self, bucket_index: int) -> None:
        while self.next_bucket < len(self.buckets) and self.buckets[self.next_bucket].pending == 0:
            self.launch(self.buckets[self.next_bucket])
            self.next_bucket += 1

    def launch(self, bucket: Bucket) -> None:
        t = now_ns()
        work = dist.all_reduce(bucket.buffer, group=self.group, async_op=True)
        bucket.future = work.get_future()
        if self.recording():
            event = self.recorder.bucket_launch(bucket.index, bucket.param_indices, bucket.nbytes, t)
            bucket.future = bucket.future.then(
                lambda fut, event=event: RankRecorder.bucket_complete(event, now_ns()))

    # -- TODO 4: finalize -----------------------------------------------------------
    def finalize(self) -> None:
        missing = [i for i in range(len(self.params)) if i not in self.got_grad]
        if missing:  # their buckets, and every bucket after the first of them, never launched
            raise RuntimeError(f"backward ended but parameters {missing} (indices in self.params) "
                               f"got no gradient: not used in the forward?")
        for bucket in self.buckets:
            bucket.future.wait()
            for i, view in zip(bucket.param_indices, bucket.views):
                self.params[i].grad.copy_(view)
        self.finalize_queued = False
