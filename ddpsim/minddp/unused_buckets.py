"""``skip_all_reduce_unused_params``: the Reducer's steps that leave out the allreduce of a
bucket holding only unused parameters (reducer.cpp, torch 2.13: ``is_unused_bucket``,
``should_skip_all_reduce_bucket``, and the skipped-bucket branch of ``finalize_backward``).

Note [Skipping the allreduce of unused buckets]: with find_unused_parameters a parameter that
took no part in the forward is marked ready with zeros at the first hook
(``unused_parameters_``), and its bucket is allreduced like any other: zeros are summed, and
``finalize_backward`` then leaves the ``.grad`` of a parameter unused on *every* rank untouched
(the used-parameter bitmap). A bucket whose parameters are *all* unused thus costs a collective
for nothing. ``skip_all_reduce_unused_params=True`` lets ``mark_bucket_ready`` pass over it: the
bucket counts as launched, in bucket order, and no collective is issued. The decision is local
(this rank's ``unused_parameters_``, not the summed bitmap), so the ranks stay paired only if the
same parameters are unused on every rank in every iteration; otherwise one rank issues an
allreduce the others do not, and the ranks pair mismatched collectives (torch's docstring warns
of a hang; with gloo, torch 2.13 and minddp alike abort on the first size mismatch: measured).
Neither checks. Which parameters count as unused:

- find_unused_parameters (dynamic graph): those the graph search missed, each iteration;
- static_graph: those without a hook in the first iteration (``delay_all_reduce``), which
  itself reduces every bucket, so skipping starts with the second backward and, as the
  construction layout is one bucket holding used parameters too, in practice with the
  rebuilt layout (the third);
- neither: none (torch then fails at the next forward if a parameter went unused), so the
  option changes nothing.

Measured on torch 2.13 (2 gloo ranks, one Linear per bucket, the middle one unused on both
ranks): the same gradients with and without the option, one bucket allreduce fewer per
iteration; a comm hook is not called for the skipped bucket.
"""
from __future__ import annotations


def is_unused_bucket(reducer, bucket) -> bool:
    """Mirrors ``Reducer::is_unused_bucket``: every parameter of the bucket is in
    ``unused_parameters_`` (this rank's, this iteration's)."""
    return all(index in reducer.unused_parameters for index in bucket.variable_indices)


def should_skip_all_reduce_bucket(reducer, bucket) -> bool:
    """Mirrors ``Reducer::should_skip_all_reduce_bucket`` (Note [Skipping the allreduce of
    unused buckets])."""
    return is_unused_bucket(reducer, bucket) and reducer.skip_all_reduce_unused_params


def record_skipped(reducer, bucket) -> None:
    """ddpsim only: tell the recorder the bucket is in the layout though it has no allreduce."""
    rec = reducer.recorder
    if rec is not None and rec.iteration is not None:
        rec.bucket_skipped(bucket.index, bucket.variable_indices, bucket.nbytes)


def skipped_in_finalize(reducer, bucket) -> bool:
    """Mirrors the first branch of ``finalize_backward``'s loop over buckets: a bucket that
    never had an allreduce (``future_work == nullptr``) is passed over, its ``.grad``s untouched.

    Note [A skipped bucket keeps its last future]: torch never clears a bucket's
    ``future_work``, so a bucket allreduced in an earlier iteration and skipped now is
    finalized with that earlier result. With gradient_as_bucket_view, ``zero_grad(set_to_none=
    False)`` and a hook whose result is a new tensor, torch 2.13 writes the earlier averaged
    gradient back into such a parameter's ``.grad`` (measured); minddp keeps ``future`` too.
    """
    if bucket.future is not None:
        return False
    if not reducer.skip_all_reduce_unused_params:  # torch: TORCH_INTERNAL_ASSERT
        raise RuntimeError("currently only support to skip all reduce for unused params when "
                           "skip_all_reduce_unused_params_ is true.")
    return True
