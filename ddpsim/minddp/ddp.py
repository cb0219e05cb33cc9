"""A readable DistributedDataParallel: the Python side of torch DDP
(torch/nn/parallel/distributed.py, torch 2.13) around ``ddpsim.minddp.reducer``.

Construction, in the four steps of ``__init__``: what DDP manages and where (the names it leaves
alone, the process group, the devices) -> the options, kept and warned about -> the delayed
allreduce, if asked -> ``_build_params_for_reducer``, with init_sync the same model on every rank
(``_verify_param_shape_across_processes``) and rank 0's parameters and buffers
(``_sync_module_states``), then ``_ddp_init_helper`` (bucket assignment, reversed, the Reducer, its
logger), mixed precision and ``_set_static_graph`` if asked.
Each forward: ``_pre_forward`` (prepare_for_forward, Join's notice, rebuild_buckets, buffer
broadcast, Join's sync flag) -> module forward -> ``_post_forward`` (prepare_for_backward). Uneven
inputs (``join``): ``ddpsim.minddp.join``. Communication hooks (``register_comm_hook``):
``ddpsim.minddp.comm_hook``. The methods called after construction (``_set_static_graph``,
``_register_builtin_comm_hook``, ``_get_ddp_logging_data``, ...): ``ddpsim.minddp.ddp_methods``.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import nn

from ddpsim import buckets, torchcompat
from ddpsim.buckets import REAL_ORDERS, BucketOrder
from ddpsim.events import now_ns
from ddpsim.minddp.autograd import DDPSink, find_tensors, queue_callback
from ddpsim.minddp import comm_hook, devices, optimizer_in_backward
from ddpsim.minddp.ddp_methods import DDPMethods
from ddpsim.minddp.logging_data import Logger
from ddpsim.minddp.buckets import compute_bucket_assignment_by_size
from ddpsim.minddp.join import Join, Joinable, JoinableDDP
from ddpsim.minddp.mixed_precision import log_config, setup_mixed_precision
from ddpsim.minddp.reducer import Reducer
from ddpsim.minddp.construction import (BROADCAST_BUCKET_BYTES, buffer_sync_flags, build_params_for_reducer,
                                        check_delay_arguments, check_initialized, module_parameters,
                                        module_states, modules_buffers, parameters_to_ignore)
from ddpsim.minddp.delayed import ALL_DELAYED_FORWARD, DelayedAllReduceDDP
from ddpsim.minddp.verify import verify_params_across_processes

class DistributedDataParallel(nn.Module, JoinableDDP, DelayedAllReduceDDP, DDPMethods):
    """Drop-in for the part of torch DDP that training code uses.

    ``bucket_order`` (ddpsim only, **not in torch**): which parameters share a bucket
    and in which order the buckets are reduced, a ``ddpsim.buckets.BucketOrder``:

    - ``None`` or ``"torch"`` (default): torch's behaviour: the construction layout
      (one bucket, or reverse definition order with find_unused_parameters), rebuilt
      once in gradient-ready order (see ``Reducer.should_rebuild_buckets``).
    - ``"reverse"``: caps over definition order, buckets reversed (torch's
      construction layout with find_unused_parameters), fixed: never rebuilt.
    - ``"definition"``: caps over definition order, bucket 0 holds the first-defined
      parameters (their gradients arrive last, so nothing launches before the end of
      backward), fixed: never rebuilt.

    ``bucket_cap_mb_list`` (torch 2.13): a cap per bucket in MiB, the first reduced
    first, the last repeated; it replaces ``bucket_cap_mb`` (Note [Caps torch takes]).

    ``batched_grad_copy`` (torch 2.13, default False: Note [Batched copies divide the flat bucket]) and
    ``init_sync`` (torch 2.13, default True: Note [init_sync] in minddp/verify.py) are torch's, and so are
    ``device_ids``, ``output_device``, ``dim``, ``check_reduction`` and ``device_mesh`` (minddp/devices.py).
    ``mixed_precision`` (torch's ``_MixedPrecision``) stops at the first forward without an accelerator, as in
    torch 2.13 (Note [Mixed precision stops at the first forward on CPU] in minddp/mixed_precision.py).
    ``delay_all_reduce_named_params`` with ``param_to_hook_all_reduce`` (Note [Delayed allreduce] in
    minddp/delayed.py) and the names ``_set_params_and_buffers_to_ignore_for_model`` stores on the module
    (Note [Names DDP ignores] in minddp/construction.py).

    ``bucket_order`` exists so real runs can measure bucket orderings that torch cannot choose
    (``python -m ddpsim record --impl minddp --order ...``), to check the simulator's
    ``order`` what-if.
    """

    def __init__(self, module, bucket_cap_mb=None, find_unused_parameters=False,
                 static_graph=False, gradient_as_bucket_view=False, process_group=None,
                 recorder=None, bucket_order=None, broadcast_buffers=None, bucket_cap_mb_list=None,
                 skip_all_reduce_unused_params=False, forward_sync_buffers=None, batched_grad_copy=False,
                 init_sync=True, device_ids=None, output_device=None, dim=0, check_reduction=False, device_mesh=None,
                 mixed_precision=None, delay_all_reduce_named_params=None, param_to_hook_all_reduce=None):
        super().__init__()
        Joinable.__init__(self)  # Join's per-model settings (off outside ``with model.join()``)
        order = BucketOrder.parse(bucket_order, allowed=REAL_ORDERS)
        self.bucket_order = None if order is BucketOrder.TORCH else order.value
        self.recorder = recorder  # ddpsim only: where the Reducer reports its events
        # 1. What DDP manages, and where, in torch's order of checks: the delay arguments and the names left
        # alone (Note [Names DDP ignores]), the process group (Note [A device mesh gives the process group]),
        # a parameter to reduce, the devices (Note [One device per DDP])
        check_delay_arguments(delay_all_reduce_named_params, param_to_hook_all_reduce)
        devices.set_process_group(self, process_group, device_mesh, module)
        self.parameters_to_ignore, self.delay_all_reduce_params = parameters_to_ignore(
            module, delay_all_reduce_named_params)
        self.module_parameters = module_parameters(module, self.parameters_to_ignore, self.delay_all_reduce_params)
        devices.place(self, self.module_parameters, device_ids, output_device, dim)
        self.static_graph = False  # _set_static_graph sets it, at the end
        self.module = module
        # 2. The options, kept (and warned about) in torch's order
        self.forward_sync_buffers, init_sync_buffers = buffer_sync_flags(broadcast_buffers, forward_sync_buffers)
        self.find_unused_parameters = find_unused_parameters
        self.require_backward_grad_sync = self.require_forward_param_sync = True
        self.gradient_as_bucket_view, self.batched_grad_copy = gradient_as_bucket_view, batched_grad_copy
        self.mixed_precision = log_config(mixed_precision)
        devices.warn_check_reduction(check_reduction)
        check_initialized(self.module_parameters)
        self.divide_by_initial_world_size = True  # set by join(); torch's default True
        self.broadcast_bucket_size = BROADCAST_BUCKET_BYTES
        # torch's _bucket_config (Note [The small first bucket], Note [Caps torch takes] in ddpsim/buckets.py)
        self.bucket_config = buckets.BucketCapacityConfig.create(bucket_cap_mb, bucket_cap_mb_list)
        self.bucket_bytes_cap = self.bucket_config.bucket_bytes_cap  # torch keeps these on DDP too
        self.bucket_bytes_cap_list = list(self.bucket_config.per_bucket_bytes_caps)
        self.bucket_bytes_cap_default = self.bucket_config.first_bucket_bytes_cap < self.bucket_bytes_cap
        # 3. The delayed allreduce: with every parameter delayed there is nothing more to build
        self.delay_grad_buffer, self.delay_grad_views, self.delay_all_reduce_all_params = None, [], False
        if self.delay_all_reduce_params and self.register_delay_all_reduce_hook(
                self.bucket_config.bucket_cap_mb, param_to_hook_all_reduce, device_ids):
            return  # Note [All parameters delayed] in minddp/delayed.py
        # 4. The same model on every rank, rank 0's weights, then the Reducer
        self.skip_all_reduce_unused_params = skip_all_reduce_unused_params  # Note [Skipping the allreduce of unused buckets]
        params, names, sparse = build_params_for_reducer(module, self.parameters_to_ignore)
        if any(sparse):
            raise NotImplementedError("minddp does not support sparse gradients")
        self.modules_buffers = modules_buffers(module, self.parameters_to_ignore)  # _assign_modules_buffers
        if init_sync:  # Note [init_sync] in minddp/verify.py; Note [Same model on every rank, checked first]
            verify_params_across_processes(self.process_group, params)
            self.sync_module_states(init_sync_buffers)
        self.ddp_init_helper(params, names, static_graph)
        if mixed_precision is not None:
            setup_mixed_precision(self, params)
        if static_graph:
            self._set_static_graph()  # the methods called after construction: minddp/ddp_methods.py
        self.lazy_init_ran = False  # _lazy_init: minddp/optimizer_in_backward.py

    @property
    def broadcast_buffers(self) -> bool:
        """Mirrors the ``broadcast_buffers`` property (2.13): ``forward_sync_buffers`` by its old name."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value: bool) -> None:
        self.forward_sync_buffers = value

    def sync_module_states(self, init_sync_buffers=True):
        """Mirrors ``_sync_module_states``: every rank starts from rank 0's weights, and its buffers
        unless ``broadcast_buffers=False`` (Note [Two buffer flags]), less the ignored ones."""
        tensors = module_states(self.module, self.parameters_to_ignore, init_sync_buffers)
        if tensors:
            torchcompat.broadcast_coalesced(self.process_group, tensors, BROADCAST_BUCKET_BYTES, 0)

    def ddp_init_helper(self, params, names, static_graph):
        """Mirrors ``_ddp_init_helper``: the bucket layout, the Reducer, and its logger (logging_data.py).

        Note [One bucket in iteration 0]: parameter definition order is not the
        order gradients arrive, and a rank with an unused branch could launch an
        allreduce that pairs with a different collective elsewhere. So torch 2.13
        starts with a single bucket ([sys.maxsize]) unless find_unused_parameters is
        on (and static_graph off), and relies on the rebuild after iteration 0; a
        bucket_cap_mb_list is used as it is, in every mode, here and in the rebuild.
        Note [Reversed buckets]: buckets come out sorted by smallest index and are
        reversed, guessing that gradients arrive in reverse definition order.
        """
        if self.bucket_order is not None:  # ddpsim only: a fixed layout, never rebuilt
            self.reducer = self.fixed_order_reducer(params, names)
        else:
            limits, limits_for_rebuilding = self.bucket_config.compute_bucket_size_limits(
                static_graph, self.find_unused_parameters)
            indices, per_bucket_limits = compute_bucket_assignment_by_size(params, limits)
            self.reducer = self.new_reducer(params, indices[::-1], per_bucket_limits[::-1], names, limits_for_rebuilding)
        self.logger = Logger(self.reducer)
        self.reducer.set_logger(self.logger)
        self.logger.set_construction_data_and_log(self, static_graph)
        devices.passing_sync_batchnorm_handle(self)

    def new_reducer(self, params, indices, limits, names, limits_for_rebuilding):
        """``dist.Reducer(...)`` as ``_ddp_init_helper`` builds it, with this DDP's caps and options."""
        caps = self.bucket_config
        return Reducer(params, indices, limits, self.process_group, caps.bucket_bytes_cap, self.find_unused_parameters,
                       self.gradient_as_bucket_view, names, caps.first_bucket_bytes_cap, self.recorder,
                       limits_for_rebuilding, self.batched_grad_copy, self.skip_all_reduce_unused_params)

    def fixed_order_reducer(self, params, names):
        """ddpsim only (``bucket_order``, not in torch): a Reducer whose layout is fixed.

        "reverse": torch's find_unused construction layout (caps over definition
        order, the first cap on the first-defined params, then reversed).
        "definition": the rebuild's caps over definition order in closing order, so
        bucket 0 holds the first-defined params and gets the first cap.
        """
        caps, specs = self.bucket_config, [buckets.spec_of(p) for p in params]
        if self.bucket_order == "reverse":
            indices, per_bucket = buckets.construction_layout(specs, caps, static_graph=False, find_unused=True)
        else:
            indices, per_bucket = buckets.rebuilt_layout(specs, list(range(len(params))), caps)
        per_bucket = [buckets.MAXSIZE if c is None else c for c in per_bucket]
        reducer = self.new_reducer(params, indices, per_bucket, names, list(caps.per_bucket_bytes_caps))
        reducer.fixed_layout = True
        return reducer

    def register_comm_hook(self, state: object, hook) -> None:
        """Mirrors ``DistributedDataParallel.register_comm_hook``: ``hook(state, bucket)`` replaces
        each bucket's allreduce; it gets a ``GradBucket`` whose gradients are *not* divided by the
        world size (Note [A hook owns the division]) and returns a ``torch.futures.Future`` of the
        bucket's new value. Once only, checked like torch (``_check_comm_hook``); torch's own hooks
        (``torch.distributed.algorithms.ddp_comm_hooks``) run unchanged. See ddpsim/minddp/comm_hook.py.
        """
        comm_hook.check_comm_hook(self, hook)
        self.logger.set_comm_hook(getattr(hook, "__qualname__", type(hook).__qualname__))
        comm_hook.register_comm_hook(self.reducer, state, hook)

    def _register_fused_optim(self, optim, *args, optim_params=None, **kwargs):
        """Mirrors ``_register_fused_optim`` (torch's name): ``optim`` steps each parameter as soon as
        its bucket is reduced (Note [The optimizer in the backward] in minddp/optimizer_in_backward.py)."""
        optimizer_in_backward.register_fused_optim(self, optim, *args, optim_params=optim_params, **kwargs)

    @contextmanager
    def no_sync(self):
        """Mirrors ``no_sync``: run forward *and* backward inside to skip the allreduce."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def forward(self, *inputs, **kwargs):
        if self.delay_all_reduce_all_params:  # Note [All parameters delayed] in minddp/delayed.py
            raise AttributeError(ALL_DELAYED_FORWARD)
        with torch.autograd.profiler.record_function("DistributedDataParallel.forward"):
            self.pre_forward()
            if self.device_ids:  # a single-GPU module: inputs to its device (Note [One device per DDP])
                inputs, kwargs = devices.move_inputs(self, inputs, kwargs)
            return self.post_forward(self.module(*inputs, **kwargs))

    def pre_forward(self):
        """Mirrors ``_pre_forward`` (Join's two allreduces: Note [Join] in minddp/join.py)."""
        if not self.lazy_init_ran:  # Note [The optimizer in the backward] in minddp/optimizer_in_backward.py
            optimizer_in_backward.lazy_init(self)
        syncing = torch.is_grad_enabled() and self.require_backward_grad_sync
        if syncing:
            self.logger.set_runtime_stats_and_log()
            self.reducer.prepare_for_forward()
        work = Join.notify_join_context(self)  # an allreduce of ones, inside ``with model.join()`` only
        if work:
            self.reducer.set_forward_pass_work_handle(work, self.divide_by_initial_world_size)
        if torch.is_grad_enabled():
            self.reducer.rebuild_buckets()
        if self.will_sync_module_buffers():
            self.sync_buffers()
        if self._join_config.enable:
            self.check_global_requires_backward_grad_sync(is_joined_rank=False)

    def will_sync_module_buffers(self):
        """Mirrors ``will_sync_module_buffers``: forward_sync_buffers on, buffers to send, and the
        last forward was a synced one (``require_forward_param_sync``)."""
        return self.require_forward_param_sync and self.forward_sync_buffers and len(self.modules_buffers) > 0

    def sync_buffers(self):
        """Mirrors ``_sync_buffers``: rank 0's buffers (e.g. BatchNorm running stats).

        Note [Buffers follow rank 0]: buffers are not gradients; torch's default
        (forward_sync_buffers=True) overwrites them with rank 0's before each forward
        that follows a synced forward (``require_forward_param_sync``). Every rank waits
        for the broadcast before its forward starts: a sync point at the forward's start.
        Under Join rank 0 may have joined with stale buffers, so the ranks first agree on the
        largest rank still training (``find_common_rank``).
        """
        start = now_ns()
        rank = 0 if not self._join_config.enable else self.find_common_rank(dist.get_rank(self.process_group), True)
        self.modules_buffers = modules_buffers(self.module, self.parameters_to_ignore)
        self.sync_module_buffers(rank)
        if self.recorder is not None:
            self.recorder.buffer_broadcast(start, now_ns(), buckets.tensor_bytes(self.modules_buffers))

    def sync_module_buffers(self, authoritative_rank):
        """Mirrors ``_sync_module_buffers`` (``_default_broadcast_coalesced``)."""
        with torch.no_grad(), torchcompat.preserve_version_counter(self.modules_buffers):
            torchcompat.broadcast_coalesced(self.process_group, self.modules_buffers,
                                            BROADCAST_BUCKET_BYTES, authoritative_rank)

    def post_forward(self, output):
        """Mirrors ``_post_forward``.

        Note [The sink]: torch passes the outputs through ``_DDPSink`` (cloned, with
        materialize_grads off) only with find_unused_parameters, and in static_graph's first
        iteration (even under no_sync), and so does minddp: nowhere else, because the sink is a node
        that makes every output's branch run in the backward, even one left out of the loss.
        """
        syncing = torch.is_grad_enabled() and self.require_backward_grad_sync
        self.require_forward_param_sync = syncing
        dynamic = self.find_unused_parameters and not self.static_graph
        if syncing:
            self.reducer.prepare_for_backward(find_tensors(output) if dynamic else [])
        if dynamic or (self.static_graph and not self.static_graph_delay_allreduce_enqueued):
            output = DDPSink.pass_through(output, self.sink_backward)
        self.clear_grad_buffer()  # Note [Delayed allreduce] in minddp/delayed.py
        return output

    def sink_backward(self):
        """Mirrors ``_DDPSink.backward``: static_graph's first backward queues the Reducer's ``delay_all_reduce``.
        It reads the DDP's flags, not the Reducer's (Note [A late _set_static_graph] in minddp/ddp_methods.py)."""
        if self.static_graph and not self.static_graph_delay_allreduce_enqueued:
            queue_callback(self.reducer.delay_all_reduce)
            self.static_graph_delay_allreduce_enqueued = True
