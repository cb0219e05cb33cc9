"""A rank's process: its place in the job, its core, its process group, its exit.

The plumbing under ``worker.py`` (and the calibration's ranks): who this rank is
(torchrun-style environment), which CPU it is pinned to, dying with the launcher,
joining the process group without opening a port, and leaving without teardown.
"""
from __future__ import annotations

import os
import sys
from datetime import timedelta

import torch.distributed as dist

from ddpsim import ranks
from ddpsim.record import cpus


def env_rank() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from the torchrun-style environment."""
    return (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
            int(os.environ.get("LOCAL_RANK", os.environ["RANK"])))

def pin_to_cpu(local_rank: int) -> None:
    """Pin this rank to one CPU (removes a bimodal slowdown seen on a 2-core CPU): the one its
    launcher reserved (Note [Recordings share the machine's CPUs] in cpus.py), else CPU r % ncpus."""
    allowed = sorted(os.sched_getaffinity(0))
    given = os.environ.get(cpus.ENV, "")
    cpu = int(given) if given.isdigit() and int(given) in allowed else allowed[local_rank % len(allowed)]
    os.sched_setaffinity(0, {cpu})

def die_with_parent() -> None:
    """Ask Linux to kill this rank if the launcher dies, so no rank is ever orphaned."""
    if os.environ.get("DDPSIM_LAUNCHED"):
        ranks.die_with_parent()


def init_process_group(backend: str, rank: int, world: int, timeout_s: float) -> None:
    """Join the ranks: through the launcher's private FileStore when it gave one, else torchrun's env://.

    Note [No port on the network]: env:// rendezvous starts a TCPStore server that
    listens on every interface, unauthenticated. ddpsim's launcher hands its ranks a
    FileStore in a private temporary folder instead (DDPSIM_STORE), which opens no
    port, and GLOO_SOCKET_IFNAME=lo so that gloo's own connections bind loopback.
    Multi-node torchrun keeps torchrun's rendezvous.
    """
    timeout = timedelta(seconds=timeout_s)
    if backend == "nccl":  # NCCL's own kernel timing events: Note [An NCCL collective's end] in gpuclock.py
        os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
    store_path = os.environ.get("DDPSIM_STORE")
    if store_path:
        store = dist.FileStore(store_path, world)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    else:
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)

def exit_now(code: int = 0) -> None:
    """Leave without running C++ destructors.

    Note [exit without teardown]: tearing down gloo at interpreter exit sometimes
    aborted a rank here ("terminate called without an active exception", SIGABRT)
    after its shard was complete. Everything is on disk by now, so skip the teardown.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
