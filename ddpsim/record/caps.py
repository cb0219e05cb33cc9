"""A recording's bucket caps, checked as torch takes them before any rank starts."""
from __future__ import annotations

import math
import re

from ddpsim.buckets import BucketCapacityConfig
from ddpsim.errors import CLIError


def check_caps(cfg) -> None:
    """--bucket-cap-mb and --bucket-cap-mb-list of RecordConfig ``cfg``: a one-line CLIError where
    torch's DDP would fail (Note [Caps torch takes] in ddpsim/buckets.py), or where it cannot run."""
    if cfg.bucket_cap_mb_list is not None and cfg.impl not in ("torch", "minddp"):
        raise CLIError(f"--bucket-cap-mb-list needs --impl torch or minddp (got --impl {cfg.impl})")
    if cfg.bucket_cap_mb is not None and not math.isfinite(cfg.bucket_cap_mb):  # torch ignores it beside a list,
        raise CLIError(f"--bucket-cap-mb must be a finite number of MiB, not {cfg.bucket_cap_mb}")  # a trace cannot hold it
    # minddp's fixed order "reverse" builds torch's find_unused_parameters layout (ddpsim.buckets.BucketOrder)
    modes = [(cfg.static_graph, cfg.find_unused_parameters)] + [(False, True)] * (cfg.order == "reverse")
    try:
        caps = BucketCapacityConfig.create(cfg.bucket_cap_mb, cfg.bucket_cap_mb_list)
        for static_graph, find_unused in modes:
            caps.compute_bucket_size_limits(static_graph, find_unused)
    except ValueError as e:
        raise CLIError(re.sub(r"\bbucket_cap_mb(_list)?\b", lambda m: "--" + m[0].replace("_", "-"), str(e))) from None
    check_torch_takes(cfg)


def check_torch_takes(cfg) -> None:
    """A one-line CLIError before any rank starts where ``--impl torch`` is given an option this
    torch's DDP does not take (torchcompat.NEWER_DDP_ARGUMENTS: torch 2.13's)."""
    if cfg.impl != "torch":
        return
    import torch

    from ddpsim import torchcompat

    for name in torchcompat.NEWER_DDP_ARGUMENTS:
        if getattr(cfg, name) not in (None, False, []) and not torchcompat.ddp_takes(name):
            raise CLIError(f"--{name.replace('_', '-')}: this torch ({torch.__version__}) has no "
                           f"DistributedDataParallel({name}) (torch 2.13 has it)")
