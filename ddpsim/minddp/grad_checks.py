"""The Reducer's checks on a gradient it is handed: ``Reducer::check_grad_layout`` (called by
``mark_variable_ready_dense``) and the bucket-view check of ``finalize_bucket_dense`` under
gradient_as_bucket_view (reducer.cpp, torch 2.13).

Note [Checks on a ready gradient]: when a parameter's gradient is ready, the Reducer copies it
into the parameter's slot of a flat bucket (Note [Gradient layout contract] in minddp/buckets.py).
Before copying it checks that the two fit:

- the dtype must be the bucket's (under mixed precision, the parameters' ``param_dtype``), or the copy
  would convert silently: a ``REDUCER_CHECK``, "Expected Float, got Double", logged (Note [Errors in
  the logging data]).
  Autograd itself refuses most ways to get there (a ``register_hook`` that returns another dtype
  fails in autograd: "hook '<lambda>' has changed the type of value"); ``p.grad.data = ...double()``
  between steps gets through, and without gradient_as_bucket_view torch's DDP then raises at the
  next backward, on every rank (with it, see below).
- the device and the number of elements must be the bucket's: ``TORCH_INTERNAL_ASSERT`` (not
  logged). ``p.grad.data = torch.zeros(2, *p.shape)`` gets a bigger gradient past autograd (its
  ``+=`` broadcasts), and torch's assert fires; minddp raises the same text, naming the function
  instead of torch's build path and line. (A device that differs, and a ``.grad`` that is its bucket
  view without gradient_as_bucket_view, are asserted the same way; neither was reached here.)
- strides that differ from the bucket view's are no error, only slower copies: one UserWarning per
  process (``TORCH_WARN_ONCE``). Seen when the parameters' strides change after construction (a
  ``model.to(memory_format=torch.channels_last)`` after DDP was built) or a ``.grad`` that breaks
  the gradient layout contract.

With gradient_as_bucket_view=True the Reducer then points ``.grad`` at the bucket view, and at the
end of the backward expects it to be so still: a ``.grad`` replaced in between (a hook of a later
parameter that sets ``p.grad = p.grad.clone()``) is a ``REDUCER_CHECK`` (``NOT_BUCKET_VIEW``,
logged). A ``.grad`` replaced between steps (``p.grad = p.grad.clone()``, ``p.grad = None``) is
fine: the next backward copies it into the bucket and re-points ``.grad``. But ``p.grad.data = ...`` on a ``.grad`` that still *is* the bucket view changes the view itself: the
view gets new memory, the checks compare the view with itself and pass, and from then on the bucket
allreduces its stale flat buffer (measured: the ranks agree, a plain model's gradients differ;
tests/test_minddp_grad_checks.py).

Note [Strides changed after construction]: the bucket views that gradients are copied *into*
(``bucket_views_in``) are made once per layout, with the parameters' strides of that moment; the
views the result is copied *out of* (``bucket_views_out``, ``populate_bucket_views_out``) are made
after every allreduce, with the parameters' strides now. After ``model.to(memory_format=
torch.channels_last)`` the two disagree until the buckets are rebuilt (at the second forward), so
the first step's gradients come back scrambled without gradient_as_bucket_view, or with a comm hook
whose result is a new tensor (measured on torch 2.13; the same on every rank). minddp keeps both
kinds of view, as torch does, and gets the same gradients.
"""
from __future__ import annotations

import warnings

import torch

from ddpsim import torchcompat
from ddpsim.minddp import messages
from ddpsim.minddp.logging_data import failed_check

_strides_warned = False  # TORCH_WARN_ONCE: one warning per process


def is_alias_of(a, b) -> bool:
    """``Tensor::is_alias_of``: both tensors live in the same storage."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def type_name(t) -> str:
    """The name torch's message prints for a tensor's type ("Float", "Double", "Half"): its
    scalar type, read from the legacy type string ("torch.FloatTensor")."""
    return t.type().rsplit(".", 1)[-1].removesuffix("Tensor")


def internal_assert(condition: str) -> str:
    """A ``TORCH_INTERNAL_ASSERT`` of ``check_grad_layout``, as minddp words its place."""
    return (f"{condition} INTERNAL ASSERT FAILED at reducer.cpp (Reducer::check_grad_layout), "
            "please report a bug to PyTorch. ")


def check_grad_layout(reducer, grad, view) -> None:
    """Mirrors ``Reducer::check_grad_layout`` (Note [Checks on a ready gradient])."""
    global _strides_warned
    expected = reducer.mixed_precision_param_dtype or view.dtype
    if grad.dtype != expected:
        raise failed_check(reducer, RuntimeError(
            f"Expected {type_name(torch.empty(0, dtype=expected))}, got {type_name(grad)}"))
    if grad.device != view.device:
        raise RuntimeError(internal_assert("grad.device() == bucket_view.device()"))
    if grad.numel() != view.numel():
        raise RuntimeError(internal_assert("grad.numel() == bucket_view.numel()"))
    if grad.stride() != view.stride() and not _strides_warned:
        _strides_warned = True
        warnings.warn(messages.strides_differ(grad, view), UserWarning, stacklevel=2)
    if not reducer.gradient_as_bucket_view and is_alias_of(grad, view):
        raise RuntimeError(internal_assert("!grad.is_alias_of(bucket_view)"))


def finalize_variable(reducer, index, view_in, view_out, global_unused: bool) -> None:
    """The body of ``finalize_bucket_dense``'s loop (reducer.cpp, torch 2.13) for one parameter:
    ``copy_bucket_to_grad`` from ``view_out``, or under gradient_as_bucket_view the copy of
    ``view_out`` into ``view_in`` and ``.grad`` pointed at ``view_in`` (Note [Strides changed after
    construction]). An unused parameter keeps its ``.grad``; so does every parameter once the
    optimizer has stepped in the backward (minddp/optimizer_in_backward.py; not reached on CPU)."""
    p = reducer.params[index]
    if not reducer.gradient_as_bucket_view:
        if not (reducer.optim_in_backward or global_unused):  # copy_bucket_to_grad
            if p.grad is None:
                p.grad = clone_obey_contract(view_out, p)
            else:
                p.grad.copy_(view_out)
        return
    if not is_alias_of(view_in, view_out):  # a hook's result in a new tensor
        view_in.copy_(view_out)
    if reducer.optim_in_backward or global_unused:
        return
    if p.grad is None:  # used on another rank only: .grad becomes the bucket view
        p.grad = view_in
    elif not is_alias_of(p.grad, view_in):  # torch's REDUCER_CHECK
        raise failed_check(reducer, RuntimeError(messages.NOT_BUCKET_VIEW))


def clone_obey_contract(view, param):
    """Mirrors ``torch::autograd::utils::clone_obey_contract``: a copy of ``view`` with the
    parameter's strides where it is non-overlapping and dense, else a contiguous one."""
    if torchcompat.is_non_overlapping_and_dense(param):
        return torch.empty_strided(param.size(), param.stride(), dtype=view.dtype, device=view.device).copy_(view)
    return view.clone(memory_format=torch.contiguous_format)
