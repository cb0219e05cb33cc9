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

    Every forward output passes through this one node (Note [The sink] in minddp/ddp.py). Its
    backward runs first in the backward pass, on the outermost graph task, so a callback it queues
    (static_graph's ``delay_all_reduce``) runs when the whole ``loss.backward()`` is over. With
    ``materialize_grads`` off, an output left out of the loss sends an undefined gradient on
    instead of nothing: its parameters' hooks fire, which find_unused_parameters needs.
    """

    @staticmethod
    def forward(ctx, on_backward, *inputs):
        ctx.set_materialize_grads(False)
        ctx.on_backward = on_backward
        return tuple(t.clone() if isinstance(t, torch.Tensor) else t for t in inputs)

    @staticmethod
    def backward(ctx, *grads):
        ctx.on_backward()
        return (None, *grads)

    @staticmethod
    def pass_through(output, on_backward):
        """As ``_post_forward`` applies it: every leaf of the output goes in (a tensor without a
        ``grad_fn``, such as a parameter returned as it is, too: the sink keeps an edge to it); the
        tensors without a ``grad_fn`` come back as they were."""
        flat, spec = torch.utils._pytree.tree_flatten(output)
        if not flat:
            return output
        passed = DDPSink.apply(on_backward, *flat)
        out = [x if isinstance(x, torch.Tensor) and x.grad_fn is None else p for x, p in zip(flat, passed)]
        return torch.utils._pytree.tree_unflatten(out, spec)
