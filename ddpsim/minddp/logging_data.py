"""DDP's logging data in the readable DDP: ``c10d::Logger`` (torch/csrc/distributed/c10d/logger.cpp,
torch 2.13), what ``DistributedDataParallel._get_ddp_logging_data()`` returns.

Note [What the logging data holds]: torch's logger keeps two maps, strings and integers, filled at
three moments: at construction (the options, the parameters, the construction buckets, some
environment variables), when a hook is registered (``comm_hook``) or static_graph is set, and at the
start of a synced forward in the sampled iterations (``set_runtime_stats_and_log``: the first ten,
then every hundredth), which reports the *previous* iteration: its index, its buckets reduced, its
unused parameters, its gradient-ready order, the rebuilt buckets once they exist, and its timings.
A rebuild happens in that same ``_pre_forward``, after the logger ran, so the rebuilt layout shows
up one forward later. ``_get_ddp_logging_data()`` returns ``{**strings, **integers}``.

The timings come from the reducer's timer (Note [The runtime timer] in minddp/timer.py), all in
nanoseconds. They appear at the second synced forward (which reports the first iteration), and
every sampled forward from then on sets the same 13 integer keys: the five stamps
(``forward_compute_time_start``, ``backward_compute_time_start``, ``backward_compute_time_end``,
``backward_comm_time_start``, ``backward_comm_time_end``), four durations
(``forward_compute_time``: forward start to backward compute start; ``backward_compute_time``;
``backward_comm_time``; ``backward_compute_comm_overlap_time``: comm start to compute end) and their
running means ``avg_*``, each ``(duration + avg * (n - 1)) // n`` over the n sampled iterations.
A duration that cannot be measured is 0 and leaves its mean as it was (but n still counts). They
measure this process, so their values differ from those of torch's DDP run beside it.

minddp fills these keys with torch's formats (lists as ``"160, 32"``, a rebuilt bucket's parameter
indices as ``"5 4 3, 2 1 0"``, booleans as 0/1), and the error keys as torch does (Note [Errors in the
logging data]). Left out, both CUDA only and never run here: torch's timer of CUDA events (minddp
times with the host clock on every device), and the early return of ``set_runtime_stats_and_log``
for a CUDA module on several devices (torch keeps no timings there).

Note [Errors in the logging data]: ``set_error_and_log`` sets ``has_error`` to 1, ``error`` to the
message and ``iteration`` to the Reducer's count of synced forwards (``num_iterations_``: how far
training got).
Two paths lead there, both once the logger exists (an error before it, early in construction, is
only raised): distributed.py's ``_log_and_throw(err_type, err_msg)`` stores ``f"{str(err_type)}:
{err_msg}"`` (``"<class 'ValueError'>: DDP runtime logging sample rate ..."``: a bad comm hook, a
sample rate below 1, Join's ``_find_common_rank`` finding no rank, a SyncBatchNorm in a CPU module at
the end of construction), and reducer.cpp's ``REDUCER_CHECK`` stores
its message as it is (a second comm hook, a late ``_set_static_graph``, a changed static graph, a
missing gradient, a parameter marked ready twice, ...). A later error replaces the earlier one. Not
logged: the Reducer's internal asserts, errors from tensors or autograd (an undefined tensor copied),
pybind11's argument checks and Python's own errors (``KeyError: 'bucket'``). Where minddp words an
error its own way (the missing gradient, marked ready twice: minddp/messages.py) its ``error`` holds
minddp's message, the one it raised.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

from ddpsim import torchcompat
from ddpsim.buckets import tensor_bytes
from ddpsim.minddp.timer import Event

# the durations: (key, start event, end event), in Logger::set_runtime_stats_and_log's order
DURATIONS = (("forward_compute_time", Event.FORWARD_START, Event.BACKWARD_COMPUTE_START),
             ("backward_compute_time", Event.BACKWARD_COMPUTE_START, Event.BACKWARD_COMPUTE_END),
             ("backward_comm_time", Event.BACKWARD_COMM_START, Event.BACKWARD_COMM_END),
             ("backward_compute_comm_overlap_time", Event.BACKWARD_COMM_START, Event.BACKWARD_COMPUTE_END))
STAMPS = {"forward_compute_time_start": Event.FORWARD_START,  # the stamps, in set_event_time's order
          "backward_compute_time_start": Event.BACKWARD_COMPUTE_START,
          "backward_comm_time_start": Event.BACKWARD_COMM_START,
          "backward_compute_time_end": Event.BACKWARD_COMPUTE_END,
          "backward_comm_time_end": Event.BACKWARD_COMM_END}
# ``caffe2::TypeMeta::name()`` of the dtypes DDP takes, as the ``dtypes`` key spells them
DTYPE_NAMES = {torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half",
               torch.bfloat16: "c10::BFloat16", torch.complex64: "c10::complex<float>",
               torch.complex128: "c10::complex<double>"}
ENV = {"master_port": "MASTER_PORT", "master_addr": "MASTER_ADDR",
       "torch_distributed_debug": "TORCH_DISTRIBUTED_DEBUG", "cuda_visible_devices": "CUDA_VISIBLE_DEVICES"}
GLOO_ENV = {"gloo_socket_ifname": "GLOO_SOCKET_IFNAME", "gloo_device_transport": "GLOO_DEVICE_TRANSPORT"}
NCCL_ENV = {"nccl_socket_ifname": "NCCL_SOCKET_IFNAME", "nccl_debug": "NCCL_DEBUG",
            "nccl_nthreads": "NCCL_NTHREADS", "nccl_ib_timeout": "NCCL_IB_TIMEOUT"}
NCCL_ENV_PAIRS = {"nccl_blocking_wait": ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"),
                  "nccl_async_error_handling": ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING")}


def failed_check(reducer, error: Exception) -> Exception:
    """The failing branch of reducer.cpp's ``REDUCER_CHECK`` macro: the message goes to the Reducer's
    logger while it lives (Note [Errors in the logging data]); the caller raises the error returned."""
    logger = reducer.logger() if reducer.logger is not None else None  # logger_.expired()
    if logger is not None:
        logger.set_error_and_log(str(error))
    return error


def has_sync_bn(module) -> bool:
    """Whether ``module`` holds a SyncBatchNorm (the logger's ``has_sync_bn``; refused on CPU: minddp/devices.py)."""
    return any(isinstance(m, torch.nn.SyncBatchNorm) for m in module.modules())


def join(values, sep=", ") -> str:
    """``c10::Join``."""
    return sep.join(str(v) for v in values)


def env(*names) -> str:
    """``getCvarString(names, "N/A")``: the first variable set, else "N/A"."""
    return next((os.environ[n] for n in names if n in os.environ), "N/A")


class Logger:
    """Mirrors ``c10d::Logger`` (Note [What the logging data holds])."""

    def __init__(self, reducer):
        self.reducer = reducer
        self.strs, self.ints = {}, {}
        self.num_iterations_stats_recorded = 0  # num_iterations_stats_recorded_

    def set_construction_data_and_log(self, ddp, static_graph: bool) -> None:
        """Mirrors ``Logger::set_construction_data_and_log``, as ``_ddp_init_helper`` calls it."""
        if static_graph:
            self.set_static_graph()
        r = self.reducer
        self.strs["module_name"] = type(ddp.module).__name__
        self.ints.update(world_size=r.world_size, rank=r.rank, iteration=0,
                         is_multi_device_module=int(ddp.is_multi_device_module))
        self.set_parameter_stats()
        self.strs["bucket_sizes"] = join(self.bucket_sizes())
        self.strs["backend_name"] = backend = dist.get_backend(r.process_group)
        self.set_env_variables(backend)
        self.strs["device_ids"] = join(ddp.device_ids or [])
        self.ints.update(output_device=-1 if ddp.output_device is None else ddp.output_device,
                         broadcast_buffers=int(ddp.forward_sync_buffers),
                         has_sync_bn=int(has_sync_bn(ddp.module)),
                         bucket_cap_bytes=r.bucket_bytes_cap, find_unused_parameters=int(r.find_unused_parameters),
                         gradient_as_bucket_view=int(r.gradient_as_bucket_view))

    def set_env_variables(self, backend: str) -> None:
        """Mirrors ``Logger::set_env_variables``; for gloo also its threads, as torch reads them."""
        names = dict(ENV, **(GLOO_ENV if backend == "gloo" else NCCL_ENV if backend == "nccl" else {}))
        self.strs.update({key: env(name) for key, name in names.items()})
        if backend == "gloo" and (threads := torchcompat.gloo_num_threads(self.reducer.process_group)) is not None:
            self.ints["gloo_num_threads"] = threads
        if backend == "nccl":
            self.strs.update({key: env(*pair) for key, pair in NCCL_ENV_PAIRS.items()})

    def set_parameter_stats(self) -> None:
        """Mirrors ``Logger::set_parameter_stats``: count, bytes, and the sorted set of dtypes."""
        params = self.reducer.params
        self.ints["num_parameter_tensors"] = len(params)
        self.ints["total_parameter_size_bytes"] = tensor_bytes(params)
        self.strs["dtypes"] = join(sorted({DTYPE_NAMES.get(p.dtype, str(p.dtype)) for p in params}))

    def bucket_sizes(self) -> list[int]:
        """Mirrors ``Logger::get_bucket_sizes``: each bucket's bytes, in bucket order."""
        params = self.reducer.params
        return [tensor_bytes(params[i] for i in b.variable_indices) for b in self.reducer.buckets]

    def set_comm_hook(self, name: str) -> None:
        """Mirrors ``Logger::set_comm_hook``: set before the registration, kept if it fails."""
        self.strs["comm_hook"] = name

    def set_uneven_input_join(self) -> None:
        """Mirrors ``Logger::set_uneven_input_join`` (``_DDPJoinHook.__init__``)."""
        self.ints["join_uneven_inputs"] = 1

    def set_static_graph(self) -> None:
        """Mirrors ``Logger::set_static_graph``: the reducer's flag, as it is now."""
        self.ints["static_graph"] = int(self.reducer.static_graph)

    def set_runtime_stats_and_log(self) -> None:
        """Mirrors ``Logger::set_runtime_stats_and_log``: the previous iteration, in the sampled
        iterations (``Reducer::should_collect_runtime_stats``)."""
        r = self.reducer
        if not r.should_collect_runtime_stats():
            return
        self.num_iterations_stats_recorded += 1
        self.ints.update(iteration=r.num_iterations, num_buckets_reduced=r.num_buckets_reduced,
                         unused_parameter_size=tensor_bytes(r.params[i] for i in r.unused_parameters))
        self.ints.setdefault("has_rebuilt_buckets", 0)  # std::map's operator[] adds the key
        if self.ints["has_rebuilt_buckets"] != int(r.has_rebuilt_bucket):  # set once, after the rebuild
            self.ints["has_rebuilt_buckets"] = int(r.has_rebuilt_bucket)
            if r.has_rebuilt_bucket:
                self.strs["rebuilt_bucket_sizes"] = join(self.bucket_sizes())
                self.strs["rebuilt_per_bucket_param_indices"] = join(
                    join(b.variable_indices, " ") for b in r.buckets)
        if r.grad_ready_order_indices:
            self.strs["prev_iteration_grad_ready_order_indices"] = join(r.grad_ready_order_indices)
        self.set_timings()

    def set_timings(self) -> None:
        """The end of ``Logger::set_runtime_stats_and_log``: ``reset_performance_stats``, then
        ``calculate_avg_time`` per duration and ``set_event_time`` per stamp (Note [What the logging
        data holds])."""
        self.ints.update(dict.fromkeys([key for key, _, _ in DURATIONS] + list(STAMPS), 0))
        for key, start, end in DURATIONS:
            self.calculate_avg_time(key, start, end)
        for key, event in STAMPS.items():
            stamp = self.reducer.timer.get_timestamp(event)  # set_event_time
            if stamp is not None:
                self.ints[key] = stamp

    def calculate_avg_time(self, key: str, start, end) -> None:
        """Mirrors ``Logger::calculate_avg_time``: the duration and the running mean ``avg_<key>``
        (created as 0 first, as std::map's operator[] does); one that cannot be measured leaves the
        duration at 0 and the mean as it was."""
        avg = self.ints.setdefault(f"avg_{key}", 0)
        duration = self.reducer.timer.measure_difference(start, end)
        if duration is None:
            return
        n = self.num_iterations_stats_recorded
        self.ints[key] = duration
        self.ints[f"avg_{key}"] = (duration + avg * (n - 1)) // n  # int64 division; never negative here

    def set_error_and_log(self, error: str) -> None:
        """Mirrors ``Logger::set_error_and_log`` (logger.hpp): Note [Errors in the logging data]."""
        self.ints["has_error"] = 1
        self.strs["error"] = error
        self.ints["iteration"] = self.reducer.num_iterations

    def get_ddp_logging_data(self) -> dict:
        """``DistributedDataParallel._get_ddp_logging_data``: ``{**strs_map, **ints_map}``, each
        map in key order (std::map)."""
        return {**dict(sorted(self.strs.items())), **dict(sorted(self.ints.items()))}
