"""The methods of torch's ``DistributedDataParallel`` that training code calls after construction
(distributed.py, torch 2.13): ``_set_static_graph``, ``_register_builtin_comm_hook``,
``_remove_autograd_hooks``, ``_check_reducer_finalized`` and ``_get_ddp_logging_data``, and the
``_log_and_throw`` that DDP's checks raise through. They start with an underscore in torch, yet user
code calls them (``ddp._set_static_graph()`` with activation checkpointing, for one), so minddp's DDP
has them under the same names.

Measured on torch 2.13 (2 and 3 gloo ranks; tests/test_minddp_ddp_methods.py):

- ``_set_static_graph()`` before the first synced forward trains exactly like ``static_graph=True``
  in the constructor (the first iteration's ``delay_all_reduce`` included), even with the buckets
  that find_unused_parameters built; with find_unused_parameters it warns as the constructor does.
  A second call only warns (UserWarning "You've set static_graph to be True, no need to set it
  again."). After a synced forward it raises the reducer's RuntimeError: Note [A late _set_static_graph].
- ``_remove_autograd_hooks()``: the reducer's hooks leave the parameters, so the next backward
  leaves each rank's own gradients, with no allreduce and no error (with static_graph too: its
  first-iteration ``delay_all_reduce`` still runs, but no parameter counts as used, so no
  ``.grad`` is written). Calling it again does nothing.
- ``_check_reducer_finalized()``: ``ensure_prior_reduction_finished``: nothing after a complete
  backward (or before any), the missing-gradients error when a parameter got no gradient.

Note [A late _set_static_graph]: ``_set_static_graph`` sets ``ddp.static_graph = True`` before the
Reducer's check, which refuses once an iteration has run; the DDP then thinks the graph is static and the
Reducer does not. The sink of the next forward reads the DDP's flag (``_DDPSink.backward``) and queues the
Reducer's ``delay_all_reduce`` after a backward that reduced as usual. Without find_unused_parameters the
Reducer never made its used-parameter map, and ``delay_all_reduce`` fails on it ("Expected a proper Tensor
but got None ..."); with it, it marks every parameter ready a second time ("Expected to mark a variable
ready only once"). Either way the finalize that was queued after it never runs, and every later forward
fails torch's internal assert in ``ensure_prior_reduction_finished``. minddp does the same, error for
error (measured on 2 gloo ranks).
"""
from __future__ import annotations

import warnings

from ddpsim.minddp import builtin_hooks, messages

SAMPLE_RATE_TOO_SMALL = "DDP runtime logging sample rate should be equal or greater than 1"  # distributed.py
AGAIN = "You've set static_graph to be True, no need to set it again."  # distributed.py, a UserWarning


class DDPMethods:
    """Mixed into ``ddpsim.minddp.DistributedDataParallel`` (ddp.py)."""

    logger = None  # torch's ``self.logger: dist.Logger | None = None``, until _ddp_init_helper makes it

    def _log_and_throw(self, err_type, err_msg):
        """Mirrors ``_log_and_throw``: the error goes into the logging data as
        ``"<class 'ValueError'>: ..."`` once the logger exists, then is raised (Note [Errors in the
        logging data] in minddp/logging_data.py)."""
        if self.logger is not None:
            self.logger.set_error_and_log(f"{str(err_type)}: {err_msg}")
        raise err_type(err_msg)

    def _set_static_graph(self):
        """Mirrors ``_set_static_graph``: the constructor calls it for ``static_graph=True``."""
        if self.static_graph:
            warnings.warn(AGAIN, stacklevel=2)
            return
        self.static_graph = True  # before the reducer's check, as in torch
        self.static_graph_delay_allreduce_enqueued = False
        self.reducer.set_static_graph()
        self.logger.set_static_graph()
        if self.find_unused_parameters:
            warnings.warn(messages.STATIC_GRAPH_FINDS_UNUSED, stacklevel=2)

    def _register_builtin_comm_hook(self, comm_hook_type):
        """Mirrors ``_register_builtin_comm_hook``: torch's C++ ALLREDUCE or FP16_COMPRESS hook
        (Note [Builtin hooks are the Python hooks in C++] in minddp/builtin_hooks.py)."""
        self.logger.set_comm_hook(str(comm_hook_type))
        builtin_hooks.register_builtin_comm_hook(self.reducer, comm_hook_type)

    def _remove_autograd_hooks(self):
        """Mirrors ``_remove_autograd_hooks`` (``Reducer::remove_autograd_hooks``)."""
        self.reducer.remove_autograd_hooks()

    def _check_reducer_finalized(self):
        """Mirrors ``_check_reducer_finalized`` (``Reducer::check_finalized``)."""
        self.reducer.ensure_prior_reduction_finished()

    def _set_ddp_runtime_logging_sample_rate(self, sample_rate):
        """Mirrors ``_set_ddp_runtime_logging_sample_rate``: after the first ten iterations, time one in
        ``sample_rate`` (Note [The runtime timer] in minddp/timer.py); a rate below 1 is logged and
        raised (``_log_and_throw``)."""
        if sample_rate < 1:
            self._log_and_throw(ValueError, SAMPLE_RATE_TOO_SMALL)
        self.reducer.set_ddp_runtime_logging_sample_rate(sample_rate)

    def _get_ddp_logging_data(self):
        """Mirrors ``_get_ddp_logging_data`` (Note [What the logging data holds] in minddp/logging_data.py)."""
        return self.logger.get_ddp_logging_data()
