"""A readable Reducer: torch's C++ ``Reducer`` (torch/csrc/distributed/c10d/reducer.cpp,
torch 2.13) in Python, one method per C++ function, read top to bottom in the order
the steps of one iteration happen.

One iteration, step by step (ddpsim method -> reducer.cpp counterpart):
 0. construction: ``initialize_buckets`` (``Reducer::initialize_buckets``) and one
    post-accumulate-grad hook per parameter (``grad_accumulator->add_post_hook``).
 1. forward begins (DDP ``_pre_forward``): ``prepare_for_forward``, then
    ``rebuild_buckets`` (after iteration 0 only; it calls
    ``ensure_prior_reduction_finished`` and ``sync_bucket_indices``).
 2. forward ends (DDP ``_post_forward``): ``prepare_for_backward``; with
    find_unused_parameters it calls ``search_unused_parameters``.
 3. backward: AccumulateGrad fires ``autograd_hook`` per parameter ->
    ``mark_variable_ready`` (copy grad / world_size into the bucket) ->
    ``mark_bucket_ready`` -> ``all_reduce_bucket`` (strictly in bucket order);
    after the last bucket: ``all_reduce_local_used_map`` (find_unused only) and
    ``finalize_backward`` is queued on the autograd engine.
 4. backward ends: ``finalize_backward`` waits for every bucket and copies the
    averaged gradients back (``finalize_bucket_dense`` / ``copy_bucket_to_grad``).
static_graph's first iteration instead runs ``delay_all_reduce`` at the end.
"""
from __future__ import annotations

import os
import weakref

import torch
import torch.distributed as dist

from ddpsim.buckets import last_bucket_small_requested, rebuild_assignment, rebuild_size_limits, spec_of
from ddpsim.minddp import batched_copy, comm_hook, grad_checks, messages, timer, unused_buckets
from ddpsim.minddp.autograd import grad_accumulator, queue_callback, reached_accumulators
from ddpsim.minddp.buckets import broadcast_layout, make_bucket
from ddpsim.minddp.logging_data import failed_check
from ddpsim.events import RankRecorder, now_ns


class Reducer(timer.RuntimeStats):
    """Mirrors ``c10d::Reducer``; see the module docstring for the order of steps."""

    def __init__(self, params, bucket_indices, per_bucket_size_limits, process_group,
                 bucket_bytes_cap, find_unused_parameters, gradient_as_bucket_view,
                 param_names, first_bucket_bytes_cap, recorder: RankRecorder | None = None,
                 bucket_bytes_cap_list=(), batched_grad_copy=False, skip_all_reduce_unused_params=False):
        """Mirrors ``Reducer::Reducer`` (``bucket_bytes_cap_list``: DDP's bucket_cap_mb_list in bytes)."""
        self.params, self.param_names = list(params), list(param_names)
        self.process_group = process_group
        self.rank, self.world_size = dist.get_rank(process_group), dist.get_world_size(process_group)
        self.bucket_bytes_cap, self.first_bucket_bytes_cap = bucket_bytes_cap, first_bucket_bytes_cap
        self.bucket_bytes_cap_list = list(bucket_bytes_cap_list)  # bucket_bytes_cap_list_; []: [first, cap]
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.mixed_precision_param_dtype = None  # mixed_precision_param_dtype_: minddp/mixed_precision.py sets it
        self.batched_grad_copy = batched_grad_copy  # batched_grad_copy_ (minddp/batched_copy.py); torch: False
        self.recorder = recorder
        self.logger = None  # logger_: set_logger, a weak reference (Note [Errors in the logging data])
        self.static_graph = False
        self.fixed_layout = False  # ddpsim only (DDP bucket_order, not in torch): never rebuild
        # skip_all_reduce_unused_params_ (minddp/unused_buckets.py); torch's default False
        self.skip_all_reduce_unused_params = skip_all_reduce_unused_params
        self.expect_autograd_hooks = self.require_finalize = False
        self.first_autograd_hook_called = self.has_marked_unused_parameters = False
        self.has_rebuilt_bucket = False
        self.num_iterations = self.num_bwd_calls = 0
        self.next_bucket = self.num_buckets_reduced = 0  # num_buckets_reduced_: the logger reads it
        self.unused_parameters, self.ready_params = [], set()
        self.rebuilt_param_indices, self.grad_ready_order_indices = [], []
        self.hooks_triggered = [0] * len(self.params)  # numGradHooksTriggeredMap_
        self.hooks_left = []  # numGradHooksTriggeredMapPerIteration_
        self.local_used_map = [0] * len(self.params)  # Note [Used-parameter bitmap]
        # local_used_map_dev_: the map as last allreduced (zeros before), what Join's shadow sends
        self.local_used_tensor = torch.zeros(len(self.params), dtype=torch.int32, device=self.params[0].device)
        self.local_used_work, self.local_used_map_reduced = None, False
        self.has_local_used_map = find_unused_parameters  # initialize_local_used_map: here, or set_static_graph
        self.div_factor = None  # kUnsetDivFactor: set at the first gradient of each backward
        self.forward_pass_work, self.use_static_world_size = None, True  # Join's notice (join.py)
        self.comm_hook = None  # comm_hook_: a PythonCommHook once registered (minddp/comm_hook.py)
        self.optim_in_backward = False  # optim_in_backward_: the hook steps, .grad is left (optimizer_in_backward.py)
        self.timer = timer.CpuTimer()  # timer_ (Note [The runtime timer] in minddp/timer.py)
        self.initialize_buckets(bucket_indices, per_bucket_size_limits)
        self.record_layout("construction")
        me = weakref.ref(self)  # the hooks must not keep the reducer alive
        self.grad_accumulators = [grad_accumulator(p) for p in self.params]
        self.hooks = [acc.register_hook(  # Note [Hooks on AccumulateGrad]
            lambda grads_in, grads_out, i=i: me() is not None and me().autograd_hook(i))
            for i, acc in enumerate(self.grad_accumulators)]

    # -- 0. buckets -----------------------------------------------------------------
    def initialize_buckets(self, bucket_indices, per_bucket_size_limits):
        """Mirrors ``Reducer::initialize_buckets`` (+ ``initialize_bucket_views``)."""
        assert not self.expect_autograd_hooks, "initialize_buckets during backward"
        self.buckets = [make_bucket(b, idx, cap, self.params) for b, (idx, cap)
                        in enumerate(zip(bucket_indices, per_bucket_size_limits))]
        self.variable_locators = [None] * len(self.params)
        for bucket in self.buckets:
            for intra, index in enumerate(bucket.variable_indices):
                self.variable_locators[index] = (bucket.index, intra)
        if self.gradient_as_bucket_view:  # old grads move into the new views
            for index, (b, intra) in enumerate(self.variable_locators):
                p, view = self.params[index], self.buckets[b].views[intra]
                if p.grad is not None:
                    view.copy_(p.grad)
                    p.grad = view

    def record_layout(self, kind):
        if self.recorder is not None:
            it = self.recorder.iteration
            start = it["iteration"] if it else self.num_iterations
            self.recorder.set_layout(start, kind, [b.describe() for b in self.buckets])

    def set_static_graph(self):
        """Mirrors ``Reducer::set_static_graph`` (DDP's ``_set_static_graph``: minddp/ddp_methods.py)."""
        if self.num_iterations != 0:
            raise failed_check(self, RuntimeError(messages.STATIC_GRAPH_TOO_LATE))
        self.static_graph = self.has_local_used_map = True

    # -- 1. forward begins ----------------------------------------------------------
    def prepare_for_forward(self):
        """Mirrors ``Reducer::prepare_for_forward``: counts iterations."""
        self.num_iterations += 1
        self.record_forward_compute_start_time()

    def should_rebuild_buckets(self):
        """Mirrors ``Reducer::should_rebuild_buckets`` (reducer.hpp).

        Note [Rebuild once, in gradient-ready order]: the construction layout
        guesses that gradients arrive in reverse definition order. During the
        first synced backward (the second with static_graph) the reducer records
        the real arrival order, and at the next forward rebuilds the buckets in
        that order, with the small first cap for the bucket reduced first (or
        bucket_cap_mb_list's caps, one per bucket in that order). With
        find_unused_parameters the arrival order may change per iteration, so
        torch never rebuilds (reducer.hpp: ``(static_graph_ ||
        !find_unused_parameters_) && !has_rebuilt_bucket_``).
        """
        return (self.static_graph or not self.find_unused_parameters) \
            and not self.has_rebuilt_bucket and not self.fixed_layout

    def rebuild_buckets(self):
        """Mirrors ``Reducer::rebuild_buckets``; True when the layout changed."""
        self.ensure_prior_reduction_finished()
        if not self.should_rebuild_buckets() or not self.rebuilt_param_indices:
            return False
        order = self.rebuilt_param_indices
        limits = rebuild_size_limits(self.bucket_bytes_cap_list, self.first_bucket_bytes_cap, self.bucket_bytes_cap)
        indices, limits = rebuild_assignment([spec_of(self.params[i]) for i in order], order, limits,
                                             last_bucket_small_requested(os.environ))  # Note [The small bucket last]
        indices, limits = self.sync_bucket_indices(indices, limits)
        self.has_rebuilt_bucket, self.rebuilt_param_indices = True, []
        self.initialize_buckets(indices, limits)
        self.record_layout("rebuilt")
        return True

    def sync_bucket_indices(self, indices, limits):
        """Mirrors ``Reducer::sync_bucket_indices``: every rank takes rank 0's layout.

        Note [Broadcast the rebuilt layout]: arrival order can differ between
        ranks (threads, unused branches), but all ranks must allreduce the same
        buckets in the same order or the collectives mismatch, so rank 0's
        layout is broadcast (reducer.cpp broadcasts indices + bucket sizes; we
        also send the caps, which only the recorder uses).
        """
        return broadcast_layout(indices, limits, self.process_group, self.params[0].device)

    def ensure_prior_reduction_finished(self):
        """Mirrors ``Reducer::ensure_prior_reduction_finished``."""
        if self.require_finalize:
            missing = [i for i in range(len(self.params)) if i not in self.ready_params]
            if not missing:  # torch: TORCH_INTERNAL_ASSERT (Note [The optimizer in the backward needs an accelerator])
                raise RuntimeError(messages.NO_UNMARKED_PARAMS)
            raise failed_check(self, messages.MissingGradientError(messages.missing_gradients(
                self.rank, missing, self.param_names, self.find_unused_parameters, self.static_graph)))

    # -- 2. forward ends ------------------------------------------------------------
    def prepare_for_backward(self, outputs):
        """Mirrors ``Reducer::prepare_for_backward`` (+ ``reset_bucket_counting``)."""
        self.record_backward_compute_start_time()
        self.expect_autograd_hooks = True
        self.grad_ready_order_indices = []
        self.next_bucket = self.num_buckets_reduced = 0
        for bucket in self.buckets:
            bucket.pending = len(bucket.variable_indices)
        if self.static_graph:
            self.hooks_left = list(self.hooks_triggered)
        self.has_marked_unused_parameters = False
        self.ready_params = set()
        if self.dynamic_graph_find_unused():
            self.unused_parameters = self.search_unused_parameters(outputs)

    def dynamic_graph_find_unused(self):
        return self.find_unused_parameters and not self.static_graph

    def static_graph_first_iteration(self):
        return self.static_graph and self.num_bwd_calls == 1

    def search_unused_parameters(self, outputs):
        """Mirrors ``Reducer::search_unused_parameters``.

        Note [Finding unused parameters]: walk ``grad_fn.next_functions`` from the
        outputs; a parameter whose AccumulateGrad node is never reached gets no
        hook this backward, so it must be marked ready by hand (at the first hook,
        see ``autograd_hook``) or its bucket would never launch.
        """
        start = now_ns()
        seen = reached_accumulators(outputs)
        unused = [i for i, acc in enumerate(self.grad_accumulators) if acc not in seen]
        if self.recorder is not None and self.recorder.iteration is not None:
            self.recorder.span("graph_search", start, now_ns())
        return unused

    # -- 3. backward ----------------------------------------------------------------
    def autograd_hook(self, index):
        """Mirrors ``Reducer::autograd_hook``: parameter ``index`` has its gradient. A hook with no
        gradient (a Function returning None for it, or an output the sink passes on undefined) marks
        its parameter ready too; its bucket slot is zeros (``mark_variable_ready_dense``)."""
        if not self.first_autograd_hook_called:
            self.first_autograd_hook_called = True
            self.num_bwd_calls += 1
        if self.dynamic_graph_find_unused() or self.static_graph_first_iteration():
            if self.params[index].grad is not None:  # Note [Used-parameter bitmap]
                self.local_used_map[index] = 1
        if self.static_graph_first_iteration():
            self.hooks_triggered[index] += 1
            return
        if not self.expect_autograd_hooks:  # no_sync(): just accumulate locally
            return
        if self.recorder is not None and self.recorder.iteration is not None:
            self.recorder.grad_ready(index, now_ns())
        self.grad_ready_order_indices.append(index)
        if not self.has_marked_unused_parameters:
            self.has_marked_unused_parameters = True
            for unused in self.unused_parameters:
                self.mark_variable_ready(unused)
        if self.static_graph and self.num_bwd_calls > 1:  # static_graph_after_first_iteration()
            if self.hooks_left[index] <= 0:  # torch's REDUCER_CHECK
                raise failed_check(self, RuntimeError(messages.GRAPH_CHANGED))
            self.hooks_left[index] -= 1
            if self.hooks_left[index] != 0:
                return
        if self.should_rebuild_buckets():
            self.rebuilt_param_indices.append(index)
        self.mark_variable_ready(index)

    def mark_variable_ready(self, index):
        """Mirrors ``Reducer::mark_variable_ready``."""
        if index in self.ready_params:
            raise failed_check(self, messages.MarkedReadyTwiceError(
                messages.marked_twice(self.rank, index, self.param_names)))
        self.ready_params.add(index)
        self.require_finalize = True
        self.set_divide_factor()
        b, intra = self.variable_locators[index]
        self.mark_variable_ready_dense(index, self.buckets[b].views[intra])
        self.buckets[b].pending -= 1
        if self.buckets[b].pending == 0:
            if self.batched_grad_copy:
                batched_copy.flush_deferred_copies(self, self.buckets[b])
            self.mark_bucket_ready(b)
        if self.next_bucket == len(self.buckets):
            if self.dynamic_graph_find_unused():
                self.all_reduce_local_used_map()
            queue_callback(self.finalize_callback)  # minddp/timer.py

    def set_divide_factor(self):
        """Mirrors ``Reducer::set_divide_factor``, once per backward: the world size, or under Join
        with ``divide_by_initial_world_size=False`` the ranks still training (Note [Join])."""
        if self.div_factor is None:
            self.div_factor = self.world_size
            if self.forward_pass_work is not None and not self.use_static_world_size:
                self.forward_pass_work.wait()
                self.div_factor = int(self.forward_pass_work.result()[0].item())

    def mark_variable_ready_dense(self, index, view):
        """Mirrors ``Reducer::mark_variable_ready_dense``.

        Note [Divide while copying]: the gradient is multiplied by 1/world_size
        while it is copied into the bucket (``at::mul_out``), saving a pass over
        the data; the allreduce then sums, giving the mean. A parameter with no
        gradient (unused) contributes zeros. With a comm hook the gradient is
        copied undivided (Note [A hook owns the division] in minddp/comm_hook.py). A gradient that
        requires grad (``backward(create_graph=True)``) is divided, then copied, which autograd refuses
        in torch as here ("a leaf Variable that requires grad is being used in an in-place operation").
        """
        p = self.params[index]
        if p.grad is None:
            if (self.dynamic_graph_find_unused() or self.static_graph_first_iteration()) \
                    and self.local_used_map[index]:  # torch's REDUCER_CHECK: used, yet no gradient now
                raise failed_check(self, RuntimeError(messages.UNDEFINED_BUT_USED))
            view.zero_()
            return
        grad_checks.check_grad_layout(self, p.grad, view)  # Note [Checks on a ready gradient]
        if grad_checks.is_alias_of(p.grad, view):  # gradient_as_bucket_view
            if self.comm_hook is None and not self.batched_grad_copy:  # batched: the flat div_ does it
                view.div_(self.div_factor)
        elif batched_copy.defers_copy(self, p.grad):  # Note [Batched copies divide the flat bucket]
            batched_copy.defer_copy(self, index)
        else:
            if self.comm_hook is None and p.grad.requires_grad:  # create_graph=True: torch's at::mul, copy_
                view.copy_(torch.mul(p.grad, 1.0 / self.div_factor))
            elif self.comm_hook is None:
                torch.mul(p.grad, 1.0 / self.div_factor, out=view)
            else:  # copy_grad_to_bucket
                view.copy_(p.grad)
            if self.gradient_as_bucket_view:
                p.grad = view

    def mark_bucket_ready(self, bucket_index):
        """Mirrors ``Reducer::mark_bucket_ready``.

        Note [Launch in bucket order]: every rank must issue the same collectives
        in the same order, but gradients may become ready in a different order on
        each rank. So a ready bucket waits for all lower-indexed buckets, and
        launching is strictly bucket 0, 1, 2, ...
        """
        if bucket_index > self.next_bucket:
            return
        while self.next_bucket < len(self.buckets) \
                and self.buckets[self.next_bucket].pending == 0:
            if self.next_bucket == 0:  # num_buckets_ready_ == 1
                self.record_backward_comm_start_time()
            bucket = self.buckets[self.next_bucket]
            if unused_buckets.should_skip_all_reduce_bucket(self, bucket):  # ddpsim/minddp/unused_buckets.py
                unused_buckets.record_skipped(self, bucket)
            else:
                self.all_reduce_bucket(bucket)
                self.num_buckets_reduced += 1
            self.next_bucket += 1

    def all_reduce_bucket(self, bucket):
        """Mirrors ``Reducer::all_reduce_bucket``: a ``GradBucket`` indexed ``next_bucket_`` (as in
        torch, also in ``delay_all_reduce``, where it stays 0) through ``run_comm_hook``."""
        start = now_ns()
        grad_bucket = comm_hook.make_grad_bucket(self.next_bucket, len(self.buckets), bucket, self.params)
        bucket.future = self.run_comm_hook(grad_bucket)
        rec = self.recorder
        if rec is not None and rec.iteration is not None:
            ev = rec.bucket_launch(bucket.index, bucket.variable_indices, bucket.nbytes, start)
            # Runs on a gloo thread at the real completion time; we wait on the chain, which
            # passes the hook's value on to finalize_backward.
            bucket.future = bucket.future.then(
                lambda fut, ev=ev: (RankRecorder.bucket_complete(ev, now_ns()), fut.value())[1])
            rec.launch_end(ev, now_ns())

    def run_comm_hook(self, grad_bucket):
        """Mirrors ``Reducer::run_comm_hook`` (``ddpsim.minddp.comm_hook.run_comm_hook``)."""
        return comm_hook.run_comm_hook(self, grad_bucket)

    def all_reduce_local_used_map(self):
        """Mirrors ``Reducer::all_reduce_local_used_map``.

        Note [Used-parameter bitmap]: with find_unused_parameters a parameter may be
        unused on one rank and used on another. Each rank marks the parameters that
        got a gradient (also during no_sync steps) in an int32 map; the maps are
        summed so ``finalize_backward`` can leave the ``.grad`` of a parameter that
        is unused on *every* rank untouched instead of writing zeros into it.
        """
        if not self.has_local_used_map:  # no map: torch copies an undefined tensor (Note [A late _set_static_graph])
            raise RuntimeError(messages.NO_LOCAL_USED_MAP)
        self.local_used_tensor = torch.tensor(self.local_used_map, dtype=torch.int32, device=self.params[0].device)
        launch = now_ns()
        work = dist.all_reduce(self.local_used_tensor, group=self.process_group, async_op=True)
        self.local_used_work = work.get_future()
        rec = self.recorder
        if rec is not None and rec.iteration is not None:
            nbytes = 4 * len(self.local_used_map)
            self.local_used_work = self.local_used_work.then(
                lambda fut: rec.bitmap_allreduce(launch, now_ns(), nbytes))

    # -- 4. backward ends -----------------------------------------------------------
    def finalize_backward(self):
        """Mirrors ``Reducer::finalize_backward``: wait, then copy results to ``.grad``."""
        if not (self.expect_autograd_hooks and self.require_finalize):  # torch: TORCH_INTERNAL_ASSERT
            raise RuntimeError("expect_autograd_hooks_ INTERNAL ASSERT FAILED: finalize_backward without a synced "
                               "backward (static_graph's first step under no_sync: Note [static_graph's first "
                               "step must sync] in ddpsim/errors.py)")
        self.expect_autograd_hooks = self.require_finalize = False
        self.first_autograd_hook_called = False
        self.div_factor = None
        if self.static_graph and self.num_bwd_calls > 1 and self.should_rebuild_buckets():
            self.rebuilt_param_indices += self.unused_parameters
        for bucket in self.buckets:  # Note [DDP Communication Hook] in reducer.cpp
            if unused_buckets.skipped_in_finalize(self, bucket):
                continue
            result = comm_hook.bucket_result(self, bucket.future.wait())
            self.finalize_bucket_dense(bucket, comm_hook.populate_bucket_views_out(bucket, result, self.params))
        if self.dynamic_graph_find_unused() or self.static_graph_first_iteration():
            if not self.local_used_map_reduced:
                self.local_used_work.wait()
        if self.dynamic_graph_find_unused():
            self.local_used_map = [0] * len(self.params)
            self.local_used_map_reduced = False
        self.record_backward_comm_end_time()

    def finalize_bucket_dense(self, bucket, views_out):
        """Mirrors ``Reducer::finalize_bucket_dense``: each parameter's result to its ``.grad``
        (``grad_checks.finalize_variable``), unless it is unused on every rank."""
        for intra, index in enumerate(bucket.variable_indices):
            unused = (self.static_graph or self.find_unused_parameters) and self.global_unused(index)
            grad_checks.finalize_variable(self, index, bucket.views[intra], views_out[intra], unused)

    def global_unused(self, index):
        """The lazy wait of ``finalize_bucket_dense``: only a parameter unused here
        needs the summed bitmap, so the bitmap allreduce is waited for only then."""
        if self.local_used_map[index]:
            return False
        if not self.local_used_map_reduced:
            self.local_used_work.wait()
            self.local_used_map = self.local_used_tensor.tolist()
            self.local_used_map_reduced = True
        return self.local_used_map[index] == 0

    # -- static_graph's first iteration ---------------------------------------------
    def delay_all_reduce(self):
        """Mirrors ``Reducer::delay_all_reduce``: static_graph's iteration 0 reduces
        everything once backward is over, after counting the hooks of each param."""
        self.record_backward_compute_end_time()
        self.record_backward_comm_start_time()
        self.all_reduce_local_used_map()
        self.unused_parameters = [i for i, n in enumerate(self.hooks_triggered) if n == 0]
        self.require_finalize = True
        self.set_divide_factor()
        for index, (b, intra) in enumerate(self.variable_locators):
            self.mark_variable_ready_dense(index, self.buckets[b].views[intra])
        for bucket in self.buckets:
            if self.batched_grad_copy:
                batched_copy.flush_deferred_copies(self, bucket)
            self.all_reduce_bucket(bucket)
        self.finalize_backward()

    def set_logger(self, logger):
        """Mirrors ``Reducer::set_logger``: where its checks log (``failed_check``)."""
        self.logger = weakref.ref(logger)

    # -- Join (ddpsim/minddp/join.py) ---------------------------------------------------
    def set_forward_pass_work_handle(self, work, use_static_world_size):
        """Mirrors ``Reducer::set_forward_pass_work_handle``: Join's allreduce of ones."""
        self.forward_pass_work, self.use_static_world_size = work, use_static_world_size

    def get_zeros_like_grad_buckets(self):
        """Mirrors ``Reducer::get_grad_buckets(return_zero_tensors=true)``: ``GradBucket``s of zeros."""
        return [comm_hook.make_grad_bucket(i, len(self.buckets), bucket, self.params,
                                           torch.zeros_like(bucket.gradients))
                for i, bucket in enumerate(self.buckets)]

    def push_rebuilt_params_for_all_indices(self):
        """Mirrors ``Reducer::push_rebuilt_params_for_all_indices``: a rank that joined before
        its first backward still has an order to rebuild by (definition order)."""
        if self.should_rebuild_buckets() and not self.rebuilt_param_indices:
            self.rebuilt_param_indices = list(range(len(self.params)))

    def remove_autograd_hooks(self):
        """Mirrors ``Reducer::remove_autograd_hooks``."""
        for handle in self.hooks:
            handle.remove()
        self.hooks = []
