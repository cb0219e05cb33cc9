"""Run metadata: what a trace says about how it was made."""
from __future__ import annotations

import datetime
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from ddpsim.buckets import last_bucket_small_requested
from ddpsim.record.config import RecordConfig

OPTION_KEYS = ("bucket_cap_mb", "find_unused_parameters", "static_graph", "gradient_as_bucket_view", "broadcast_buffers",
               "no_sync_every", "batch_size", "seed", "iters", "lr", "timeout_s", "uneven")
GIVEN_ONLY = ("bucket_cap_mb_list", "skip_all_reduce_unused_params", "batched_grad_copy")  # torch 2.13's, written when given (not None/False)


def rank_header(cfg: RecordConfig, backend: str, world_size: int, extra: dict | None = None) -> dict:
    """The facts one rank writes at the top of its shard."""
    config = asdict(cfg)
    options = {k: v for k, v in config.items() if k in OPTION_KEYS}
    if cfg.join:  # written only where used, so that other runs' options stay as they were
        options.update(join=True, divide_by_initial_world_size=cfg.divide_by_initial_world_size)
    for key in GIVEN_ONLY:  # likewise: in options and config where given, in neither where not
        if config[key] in (None, False):
            del config[key]
        else:
            options[key] = config[key]
    if cfg.impl in ("torch", "minddp") and last_bucket_small_requested(os.environ):  # the ranks' environment
        options["last_bucket_small"] = True  # DDP_SET_LAST_BUCKET_CAP=1: Note [The small bucket last]
    if cfg.comm_hook is None:  # likewise: a run without a hook writes the config it always wrote
        config = {k: v for k, v in config.items() if k not in cfg.HOOK_FIELDS}
    else:
        options["comm_hook"] = config["comm_hook"] = portable_spec(cfg.comm_hook)  # a hook file too
    if cfg.comm_hook == "powersgd":  # the values the run used (torch's defaults where not given)
        from ddpsim.record.hooks import POWERSGD_RANK, POWERSGD_START_ITER
        options.update(powersgd_rank=cfg.powersgd_rank or POWERSGD_RANK,
                       powersgd_start_iter=POWERSGD_START_ITER if cfg.powersgd_start_iter is None
                       else cfg.powersgd_start_iter)
    return {
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "backend": backend,
        "world_size": world_size,
        "impl": cfg.impl,
        "model": portable_spec(cfg.model),
        "options": options,
        "config": {**config, "model": portable_spec(cfg.model)},
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": portable_command(sys.argv),
        **(extra or {}),
    }


# Note [No paths in a trace]: traces travel (the bundled samples, a colleague's upload, a
# course's baseline), so what a trace says about how it was made names no folder of the
# machine that made it: the rank's program is written as ``python -m MODULE`` and every
# absolute path among its arguments by its file name. ``meta.config`` holds the options; a model or a
# comm hook given as a file (``/x/towers.py:factory``), in ``meta.model``, ``meta.config.model``,
# ``meta.options.comm_hook`` and ``meta.config.comm_hook``, is named by that file's name
# (``towers.py:factory``), which records it again from the folder that holds it.


def portable_command(argv: list[str]) -> str:
    """``argv`` as a command line that names no folder (Note [No paths in a trace])."""
    if not argv:
        return ""
    return " ".join(["python", "-m", _module(argv[0]), *(_name(a) for a in argv[1:])])


def portable_spec(spec: str) -> str:
    """A ``--model`` or ``--comm-hook`` value that names no folder (Note [No paths in a trace]): ``/x/towers.py:factory`` ->
    ``towers.py:factory``, as ``portable_command`` names an absolute path; a zoo name, a relative path or
    ``package.module:factory`` as it is."""
    where, colon, attr = spec.rpartition(":")
    return f"{Path(where).name}:{attr}" if colon and os.path.isabs(where) else spec


def _module(program: str) -> str:
    """The module a program file is: ``/x/ddpsim/record/worker.py`` -> ``ddpsim.record.worker``,
    ``/x/ddpsim/__main__.py`` and the installed ``/venv/bin/ddpsim`` -> ``ddpsim``; another
    file by its name (``train.py`` -> ``train``)."""
    parts = Path(program).parts
    package = [i for i, part in enumerate(parts[:-1]) if part == "ddpsim"]
    names = list(parts[package[-1]:]) if package else [Path(program).name]
    names[-1] = names[-1].removesuffix(".py")
    if names[-1] == "__main__" and len(names) > 1:
        names.pop()
    return ".".join(names)


def _name(arg: str) -> str:
    """An absolute path (alone or as ``--flag=PATH``) by its file name; anything else as it is."""
    flag, eq, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    return f"{flag}{eq}{Path(value).name}" if os.path.isabs(value) else arg
