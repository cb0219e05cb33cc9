"""``batched_grad_copy``: the Reducer's steps that defer each gradient's copy into its bucket and
flush them all when the bucket's last gradient arrives (reducer.cpp, torch 2.13: the
``batched_grad_copy_`` branches of ``mark_variable_ready_dense``, ``flush_deferred_copies``, and
its calls in ``mark_variable_ready`` and ``delay_all_reduce``).

Note [Batched copies divide the flat bucket]: by default each gradient is divided while it is
copied into its bucket view, one ``mul_out(view, grad, 1/n)`` per parameter (Note [Divide while
copying] in reducer.py). With ``batched_grad_copy=True`` a gradient that is not already its
bucket view is only remembered; once the bucket's ``pending`` count reaches zero, one
``_foreach_copy_`` copies every remembered gradient into its view (re-aliasing ``.grad`` to the
view under gradient_as_bucket_view), and one ``div_(n)`` divides the whole flat bucket, zeros of
unused parameters included (0/n is 0). A gradient that already is its view (gradient_as_bucket_view
after the first step) skips its own ``div_``: the flat one covers it. With a comm hook nothing is
divided, copies only. A gradient that requires grad (``backward(create_graph=True)``) is copied at
once as without batching (torch logs that batching is bypassed).

Why the last bits change: ``x * (1/n)`` rounds twice (1/n to float, then the product), ``x / n``
once, so for an ``n`` that is not a power of two the two differ in the last bit for some ``x``.
Measured on torch 2.13, 3 gloo ranks (tests/test_batched_grad_copy.py: with and without
gradient_as_bucket_view, find_unused_parameters, static_graph, no_sync, accumulation): the
averaged gradients differ from the default's by up to 9.5e-07; on 2 ranks (1/2 is exact) they
are bit-identical, and so they are under torch's allreduce and fp16 hooks, which divide by
themselves. minddp does the same operations in the same order: bit for bit torch's, either way.
"""
from __future__ import annotations

from ddpsim import torchcompat


def defers_copy(reducer, grad) -> bool:
    """The test of ``mark_variable_ready_dense``: batched_grad_copy on, and the gradient does not
    require grad (create_graph bypasses batching)."""
    return reducer.batched_grad_copy and not grad.requires_grad


def defer_copy(reducer, index) -> None:
    """Mirrors ``bucket.deferred_copy_indices.push_back(intra_bucket_index)``."""
    b, intra = reducer.variable_locators[index]
    reducer.buckets[b].deferred_copy_indices.append(intra)


def flush_deferred_copies(reducer, bucket) -> None:
    """Mirrors ``Reducer::flush_deferred_copies`` (Note [Batched copies divide the flat bucket])."""
    if bucket.deferred_copy_indices:
        params = [reducer.params[bucket.variable_indices[i]] for i in bucket.deferred_copy_indices]
        if any(p.grad is None for p in params):  # torch: TORCH_INTERNAL_ASSERT
            raise RuntimeError("Gradient became undefined between defer and flush")
        views = [bucket.views[i] for i in bucket.deferred_copy_indices]
        torchcompat.foreach_copy_(views, [p.grad for p in params])
        if reducer.gradient_as_bucket_view:
            for p, view in zip(params, views):
                p.grad = view
        bucket.deferred_copy_indices.clear()
    if reducer.comm_hook is None:
        bucket.gradients.div_(reducer.div_factor)
