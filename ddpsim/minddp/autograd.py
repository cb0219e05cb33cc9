"""The autograd pieces of minddp: AccumulateGrad hooks, the graph walk, the sink."""
from __future__ import annotations

import dataclasses

import torch

queue_callback = torch.autograd.Variable._execution_engine.queue_callback


def grad_accumulator(param: torch.Tensor):
    """The AccumulateGrad node of a leaf (``torch::autograd::impl::grad_accumulator``).

    Note [Hooks on AccumulateGrad]: reducer.cpp registers a *post hook on the
    AccumulateGrad node* of each parameter; it runs once the gradient has been
    accumulated into ``.grad``, even when the incoming gradient is undefined
    (``Tensor.register_post_accumulate_grad_hook`` would skip that case). minddp
    does the same from Python with ``Node.register_hook``. The node must be kept
    alive by the caller: autograd holds it only weakly.
    """
    with torch.enable_grad():
        return param.view_as(param).grad_fn.next_functions[0][0]


def reached_accumulators(outputs) -> set:
    """The walk of ``Reducer::search_unused_parameters``: every node reachable from
    the outputs' ``grad_fn`` through ``next_functions``."""
    queue = [t.grad_fn for t in outputs if t.grad_fn is not None]
    seen = set()
    while queue:
        for fn, _ in queue.pop().next_functions:
            if fn is not None and fn not in seen:
                seen.add(fn)
                queue.append(fn)
    return seen


def find_tensors(obj):
    """Mirrors ``_find_tensors`` in distributed.py: the tensors in a forward output."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in find_tensors(x)]
    if isinstance(obj, dict):
        return [t for x in obj.values() for t in find_tensors(x)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # a forward returning a dataclass
        return [t for f in dataclasses.fields(obj) for t in find_tensors(getattr(obj, f.name))]
    return []


class DDPSink(torch.autograd.Function):
    """Mirrors ``_DDPSink`` in distributed.py.

    Every forward output passes through this one node. Its backward runs first in
    the backward pass, on the outermost graph task, so callbacks it queues run when
    the whole ``loss.backward()`` is over (not at the end of a reentrant inner
    backward, as a callback queued from a parameter hook would). With
    ``materialize_grads`` off, an output left out of the loss sends an undefined
    gradient on instead of nothing (needed by find_unused_parameters).
    """

    @staticmethod
    def forward(ctx, on_backward, clone, *tensors):
        ctx.set_materialize_grads(False)
        ctx.on_backward = on_backward
        return tuple(t.clone() for t in tensors) if clone else tensors

    @staticmethod
    def backward(ctx, *grads):
        ctx.on_backward()
        return (None, None, *grads)

    @staticmethod
    def pass_through(output, on_backward, clone):
        flat, spec = torch.utils._pytree.tree_flatten(output)
        idx = [i for i, t in enumerate(flat)
               if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        if not idx:
            return output
        passed = DDPSink.apply(on_backward, clone, *[flat[i] for i in idx])
        for i, t in zip(idx, passed):
            flat[i] = t
        return torch.utils._pytree.tree_unflatten(flat, spec)


def on_backward_start(output, callback) -> None:
    """Calls ``callback()`` once per backward, when it first reaches one of ``output``'s tensors
    (``register_multi_grad_hook``, mode "any"): no node added to the graph (Note [The sink])."""
    flat, _ = torch.utils._pytree.tree_flatten(output)
    tensors = [t for t in flat if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    if tensors:
        torch.autograd.graph.register_multi_grad_hook(tensors, lambda grad: callback(), mode="any")
