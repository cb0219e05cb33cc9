"""minddp: a readable re-implementation of torch DistributedDataParallel.

``DistributedDataParallel`` (ddp.py) + ``Reducer`` (reducer.py) match torch 2.13's DDP
bucket for bucket, communication hooks included (comm_hook.py: ``GradBucket``);
``NaiveDDP`` (naive.py) is the no-bucket, no-overlap baseline and ``OverlapDDP`` (overlap.py)
the per-parameter allreduce launched from each gradient's hook.
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
