"""Which CPU each rank of a CPU recording is pinned to, when several recordings share a machine.

Note [Recordings share the machine's CPUs]: rank r of a recording is pinned to one CPU (a 2-core
machine showed a bimodal slowdown without it: ``process.pin_to_cpu``). Every recording used to
pin the same way, rank r on CPU r % n, so recordings running at the same time stacked their ranks
on the first cores: twelve 3-rank recordings started together on a 16-core machine put twelve
rank 0s on CPU 0, and none had trained an iteration after 80 s (docs/gpu.md), while 13 cores idled.
So the launcher reserves its CPUs in a registry kept by this user's recordings (a small JSON file in
the temporary folder, read and written under ``flock``): its ranks take the CPUs the fewest
reserved ranks hold, in the same rotation as before (ranks r and r + n share a CPU, as the
simulator assumes: ``learn/contention.py``), and hand them back when the recording ends; entries
of a launcher that died are dropped by the next one. Alone on a machine, a recording still pins
rank r to CPU r % n. The rank reads its CPU from ``DDPSIM_CPU``; under torchrun there is none,
and rank r goes to CPU r % n.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import uuid
from collections import Counter
from pathlib import Path

ENV = "DDPSIM_CPU"  # the CPU a launched rank pins itself to (set by the launcher)


def registry() -> Path:
    """This user's registry of reserved CPUs: {"pid:id": [cpu of each rank]}."""
    return Path(tempfile.gettempdir()) / f"ddpsim-cpus-{os.getuid()}.json"


@contextlib.contextmanager
def reserved(world_size: int):
    """The CPU of each local rank 0..world_size-1, reserved while the block runs (None where the
    registry cannot be kept: the ranks then take CPU r % n)."""
    allowed = sorted(os.sched_getaffinity(0))
    key = f"{os.getpid()}:{uuid.uuid4().hex}"
    try:
        with _table() as table:
            held = Counter(cpu for cpus in table.values() for cpu in cpus)
            order = sorted(allowed, key=lambda cpu: (held[cpu], cpu))  # the least held first
            mine = [order[r % len(order)] for r in range(world_size)]
            table[key] = mine
    except OSError:  # no registry (a temporary folder that cannot be written): rank r on CPU r % n
        yield None
        return
    try:
        yield mine
    finally:
        with contextlib.suppress(OSError), _table() as table:
            table.pop(key, None)


@contextlib.contextmanager
def _table():
    """The registry as a dict, locked, without the entries of processes that are gone; written back
    after the block. An unreadable registry counts as empty (it only spreads ranks out)."""
    fd = os.open(registry(), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with os.fdopen(os.dup(fd), "r+") as f:
            try:
                table = {k: v for k, v in json.load(f).items() if _alive(k) and isinstance(v, list)}
            except (ValueError, AttributeError):
                table = {}
            yield table
            f.seek(0)
            f.truncate()
            json.dump(table, f)
    finally:
        os.close(fd)  # and with it the lock


def _alive(key: str) -> bool:
    """Whether the launcher that wrote ``key`` ("pid:id") still runs."""
    try:
        os.kill(int(key.split(":")[0]), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:  # someone else's process: running
        return True
    return True
