"""Run metadata: what a trace says about how it was made."""
from __future__ import annotations

import datetime
import platform
import sys
from dataclasses import asdict

import torch

from ddpsim.record.config import RecordConfig

OPTION_KEYS = ("bucket_cap_mb", "find_unused_parameters", "static_graph", "gradient_as_bucket_view",
               "no_sync_every", "batch_size", "seed", "iters", "lr", "timeout_s")


def rank_header(cfg: RecordConfig, backend: str, world_size: int, extra: dict | None = None) -> dict:
    """The facts one rank writes at the top of its shard."""
    options = {k: v for k, v in asdict(cfg).items() if k in OPTION_KEYS}
    return {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "backend": backend,
        "world_size": world_size,
        "impl": cfg.impl,
        "model": cfg.model,
        "options": options,
        "config": asdict(cfg),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(sys.argv),
        **(extra or {}),
    }
