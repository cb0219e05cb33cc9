"""Skip marks for minddp's comparisons with a torch whose DDP lacks what torch 2.13's has.

minddp mirrors torch 2.13's DDP. Where this torch's DDP does not take an option a comparison
gives it, or sizes its buckets without 2.13's ``_BucketCapacityConfig``, the comparison cannot be
made: it is skipped with the reason, not failed (docs/torch-matrix.md lists what each torch lacks).
"""
import pytest
import torch

from ddpsim import torchcompat


def lacking(options) -> list[str]:
    """The ``options`` (names, or a dict's keys) this torch's ``DistributedDataParallel`` does not take."""
    return [o for o in options if not torchcompat.ddp_takes(o)]


def needs_ddp(*options: str):
    """Skip unless this torch's ``DistributedDataParallel`` takes every one of ``options``."""
    missing = lacking(options)
    return pytest.mark.skipif(bool(missing), reason=f"torch {torch.__version__}'s DistributedDataParallel "
                              f"has no {', '.join(missing)} (torch 2.13 has it)")


def torch_and_minddp(*options: str) -> list:
    """The ``impl`` parameters of a test that runs each: "torch" (skipped where its DDP lacks
    ``options``) and "minddp" (which takes them on every torch)."""
    return [pytest.param("torch", marks=needs_ddp(*options)), "minddp"]


HAS_CAPACITY_CONFIG = torchcompat.torch_bucket_limits(None, None, False, False) is not None
needs_capacity_config = pytest.mark.skipif(not HAS_CAPACITY_CONFIG, reason=(
    f"torch {torch.__version__}'s DistributedDataParallel has no _BucketCapacityConfig "
    "(torch 2.13's caps from bucket_cap_mb and bucket_cap_mb_list)"))
