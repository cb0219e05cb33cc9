"""Which CPU each rank of a CPU recording is pinned to, when several recordings share a machine.

Note [Recordings share the machine's CPUs]: rank r of a recording is pinned to one CPU (a 2-core
machine showed a bimodal slowdown without it: ``process.pin_to_cpu``). Every recording used to
pin the same way, rank r on CPU r % n, so recordings running at the same time stacked their ranks
on the first cores: twelve 3-rank recordings started together on a 16-core machine put twelve
rank 0s on CPU 0, and none had trained an iteration after 80 s (docs/gpu.md), while 13 cores idled.
So the launcher reserves its CPUs in a registry kept by this user's recordings (a small JSON file in
the temporary folder, read and written under ``flock``): its ranks take the CPUs the fewest
reserved ranks hold, in the same rotation as before (ranks r and r + n share a CPU, as the
simulator assumes: ``learn/contention.py``), and hand them back when the recording ends (the file
goes with the last entry); entries of a launcher that died are dropped by the next one. Alone on a
machine, a recording still pins rank r to CPU r % n. The rank reads its CPU from ``DDPSIM_CPU``;
under torchrun there is none, and rank r goes to CPU r % n.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

from ddpsim.ranks import running

ENV = "DDPSIM_CPU"  # the CPU a launched rank pins itself to (set by the launcher; empty: CPU r % n)
LOCK_WAIT_S = 5.0  # s the registry may stay locked by another launcher before ranks pin as r % n


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
    except OSError:  # no registry (a folder that cannot be written, a file not ours, a lock held too long)
        yield None
        return
    try:
        yield mine
    finally:
        if key.startswith(f"{os.getpid()}:"):  # not in a child that inherited the block
            with contextlib.suppress(OSError), _table() as table:
                table.pop(key, None)


@contextlib.contextmanager
def _table():
    """The registry as a dict, locked, without the entries of processes that are gone; replaced
    whole after the block (a crash mid-write leaves the old one), or removed when empty (nothing
    is left in the temporary folder). An unreadable registry counts as empty: it only spreads ranks."""
    path = registry()
    fd = _open_locked(path)
    try:
        try:
            table = {k: v for k, v in json.loads(os.read(fd, 1 << 20) or b"{}").items()
                     if _alive(k) and isinstance(v, list)}
        except (ValueError, AttributeError):
            table = {}
        yield table
        if not table:
            os.unlink(path)
            return
        new = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w") as f:
            json.dump(table, f)
        os.replace(new, path)  # waiters see another file there and open it again (_open_locked)
    finally:
        os.close(fd)  # and with it the lock


def _open_locked(path: Path) -> int:
    """``path`` (this user's own file, not a link) opened and locked; opened again if another
    process replaced or removed it meanwhile. OSError if it is not ours or stays locked too long."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.getuid() or st.st_mode & 0o022:
                raise PermissionError(f"{path} is not this user's own")
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"{path} stayed locked for {LOCK_WAIT_S:g} s") from None
                    time.sleep(0.01)
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path, follow_symlinks=False).st_ino == st.st_ino:
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _alive(key: str) -> bool:
    """Whether the launcher that wrote ``key`` ("pid:id") still runs."""
    pid = key.split(":")[0]
    return pid.isdigit() and running(int(pid))
