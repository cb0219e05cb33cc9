"""OverlapDDP: one allreduce per parameter, launched from each gradient's hook.

The second rung of the ladder naive -> overlap -> bucketed (minddp) -> torch's DDP, and
the DDP that courses ask students to write first:

- as soon as a parameter's gradient is accumulated (``register_post_accumulate_grad_hook``,
  the Python counterpart of the reducer's hook on AccumulateGrad, ``autograd_hook`` in
  reducer.cpp), it is divided by the world size and its allreduce is launched
  asynchronously, so communication overlaps the rest of backward;
- a callback queued on the autograd engine at the first hook (as the reducer queues
  ``finalize_backward``) waits for every allreduce at the end of ``loss.backward()``.

What it lacks, and the next rungs add: every parameter pays a collective's fixed cost
(buckets pack ~25 MiB per allreduce), and the launch order is whatever order the
hooks fire in on each rank. That is safe only when every rank runs the same graph
(Note [Same graph, same launch order]); torch fixes one order for all ranks by
bucketing in index order and broadcasting rank 0's layout (``sync_bucket_indices``).

Recording: each parameter is its own "bucket", with the layout of ``NaiveDDP``
(bucket k holds parameter n-1-k); buckets launch in gradient-ready order, not in
index order.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ddpsim.minddp.naive import NaiveDDP
from ddpsim.events import now_ns


class OverlapDDP(NaiveDDP):
    """Same constructor as ``minddp.DistributedDataParallel``; bucket options are ignored.

    Note [Same graph, same launch order]: collectives pair up by launch order, so all
    ranks must launch the same parameters in the same order. Hooks fire in the autograd
    engine's order, which is the same on every rank when every rank computes the same
    graph. Parameters without a gradient this backward (an unused branch) are reduced
    last, in index order, from zeros, so a graph that only drops parameters still pairs.
    """

    def grad_ready(self, index):
        """Hook: timestamp the gradient, launch its allreduce, queue the final wait."""
        if not self._syncing:
            return
        rec = self._recording()
        t = now_ns()
        if rec is not None:
            rec.grad_ready(index, t)
        if not self._queued:
            self._queued, self._works = True, {}
            torch.autograd.Variable._execution_engine.queue_callback(self.wait_all)
        self.launch(index, self.params[index].grad, rec)

    def launch(self, index, grad, rec):
        """Divide by the world size (as DDP's bucket copy does) and start the allreduce."""
        grad.mul_(1.0 / self.world_size)
        start = now_ns()
        future = dist.all_reduce(grad, group=self.process_group, async_op=True).get_future()
        if rec is not None:
            bucket = self.launch_order.index(index)
            event = rec.bucket_launch(bucket, [index], grad.numel() * grad.element_size(), start,
                                      ready_ns=start)
            rec.launch_end(event, now_ns())

            def done(fut, event=event):  # runs on a gloo thread at the real completion time
                rec.bucket_complete(event, now_ns())
                return fut.value()
            future = future.then(done)
        self._works[index] = (future, grad)

    def wait_all(self):
        """Mirrors the role of ``finalize_backward``: wait for every allreduce."""
        self._queued = False
        rec = self._recording()
        for i in range(len(self.params)):  # Note [Same graph, same launch order]
            if i not in self._works:
                self.launch(i, torch.zeros_like(self.params[i]), rec)
        for i, (future, grad) in self._works.items():
            future.wait()
            self.params[i].grad = grad
        self._works = {}

    def _recording(self):
        rec = self.recorder
        return rec if rec is not None and rec.iteration is not None else None
