"""minddp: a readable re-implementation of torch DistributedDataParallel.

``DistributedDataParallel`` (ddp.py) + ``Reducer`` (reducer.py) match torch 2.13's DDP
bucket for bucket, communication hooks included (comm_hook.py: ``GradBucket``);
``NaiveDDP`` (naive.py) is the no-bucket, no-overlap baseline and ``OverlapDDP`` (overlap.py)
the per-parameter allreduce launched from each gradient's hook.

Where to read, first the core (one iteration, in the order it happens):
- ddp.py: the constructor and the forward (torch/nn/parallel/distributed.py);
- reducer.py: buckets filled and reduced during the backward (reducer.cpp), with buckets.py
  (the flat buffers), autograd.py (the gradient hooks, the graph walk) and comm_hook.py;
- join.py: uneven inputs (``Join``).
Then the options, one module each, read when you need them:
- construction.py (the parameters DDP manages, the buffer flags), verify.py (the same model on
  every rank), devices.py (``device_ids``, ``device_mesh``), delayed.py (the delayed allreduce),
  mixed_precision.py, optimizer_in_backward.py;
- the Reducer's options: unused_buckets.py (``skip_all_reduce_unused_params``), batched_copy.py
  (``batched_grad_copy``), builtin_hooks.py (torch's C++ comm hooks);
- ddp_methods.py (``_set_static_graph`` and the other methods called after construction),
  logging_data.py (``_get_ddp_logging_data``) with timer.py (its timings), messages.py (the errors).
"""
from ddpsim.minddp.buckets import compute_bucket_assignment_by_size
from ddpsim.minddp.comm_hook import GradBucket
from ddpsim.minddp.ddp import DistributedDataParallel
from ddpsim.minddp.messages import MarkedReadyTwiceError, MissingGradientError
from ddpsim.minddp.naive import NaiveDDP
from ddpsim.minddp.overlap import OverlapDDP
from ddpsim.minddp.reducer import Reducer

__all__ = ["DistributedDataParallel", "GradBucket", "NaiveDDP", "OverlapDDP", "Reducer",
           "compute_bucket_assignment_by_size",
           "MissingGradientError", "MarkedReadyTwiceError"]
