"""``python -m ddpsim record``: run real DDP on N processes and write a trace.

Started directly, it launches the ranks itself. Started by ``torchrun`` (RANK,
WORLD_SIZE and MASTER_ADDR in the environment), this process is one rank: it
writes ``OUT.rankR.jsonl``, and rank 0 merges the shards into OUT when they are
all on its disk (one node); across nodes, run ``python -m ddpsim merge``.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ddpsim.cli.headline import headline_lines
from ddpsim.cli.progress import progress_bar
from ddpsim.errors import CLIError
from ddpsim.record import config as record_config
from ddpsim.record.launcher import record, shard_paths
from ddpsim.record.merge import merge_files
from ddpsim.trace.writer import refuse_empty, refuse_unwritable

HELP = "record real DDP on N local processes (or under torchrun) into a trace"


def add_arguments(p) -> None:
    record_config.add_arguments(p)
    p.add_argument("--out", default="run.json", help="trace file to write (JSON; default run.json here)")
    p.add_argument("--master-port", type=int, default=None,
                   help="MASTER_PORT handed to the ranks (a free one is picked if it is busy or not given); "
                        "the launcher's own rendezvous is a private FileStore and opens no port")


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "DDPSIM_LAUNCHED" not in os.environ


def main(args) -> int:
    from ddpsim import torchcompat  # imports torch: here, so that the other commands start without it

    refuse_empty(args.out, "--out")
    if not Path(args.out).is_dir():  # a folder: the launcher says what to name instead
        refuse_unwritable(args.out, "--out")  # before a rank starts (it named the run's .logs folder, after)
    cfg = record_config.from_args(args)  # a backend this node cannot run stops here, one line
    if args.master_port is not None and not 1 <= args.master_port <= 65535:
        raise CLIError(f"--master-port must be a TCP port, 1 to 65535, not {args.master_port}")
    out = Path(args.out)
    # The torch-version warning comes after the input checks, so that bad input is one line on
    # any torch, and from one process only (rank 0 under torchrun), beside the placement line.
    if under_torchrun():
        if os.environ.get("RANK") == "0":
            torchcompat.warn_if_unsupported()
            print(f"ddpsim record: {cfg.placement().line()}", file=sys.stderr)
        return _torchrun_rank(cfg, out)
    torchcompat.warn_if_unsupported()
    print(f"ddpsim record: {cfg.placement().line()}", file=sys.stderr)
    show = progress_bar("recording", "iterations")
    trace = record(cfg, out, progress=show, master_port=args.master_port)
    head = f"wrote {out}: {cfg.model}, {cfg.impl} DDP, {cfg.world_size} rank{'s' if cfg.world_size != 1 else ''}, {cfg.iters} iterations"
    print("\n".join(headline_lines(trace, head)))
    return 0


def _torchrun_rank(cfg, out: Path) -> int:
    from ddpsim.record.process import env_rank, exit_now
    from ddpsim.record.worker import run_rank

    rank, world, _ = env_rank()
    if world != cfg.world_size:
        cfg.world_size = world  # torchrun decides the world size
    shards = shard_paths(out, world)
    run_rank([cfg], [str(shards[rank])])
    if rank == 0:
        if all(s.exists() for s in shards):
            merge_files(shards, out)
            print(f"wrote {out} from {world} shards")
        else:
            print(f"rank 0 wrote {shards[0]}; gather every node's {out.name}.rank*.jsonl and run "
                  f"python -m ddpsim merge {out.name}.rank*.jsonl --out {out}")
    exit_now(0)  # see Note [exit without teardown] in worker.py
