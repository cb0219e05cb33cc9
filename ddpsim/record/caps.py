"""A recording's bucket caps, checked as torch takes them before any rank starts."""
from __future__ import annotations

import math
import re

from ddpsim.buckets import BucketCapacityConfig
from ddpsim.errors import CLIError


def check_caps(cfg) -> None:
    """--bucket-cap-mb and --bucket-cap-mb-list of RecordConfig ``cfg``: a one-line CLIError where
    torch's DDP would fail (Note [Caps torch takes] in ddpsim/buckets.py)."""
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

