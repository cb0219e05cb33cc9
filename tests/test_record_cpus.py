"""Recordings at the same time on one machine pin their ranks to different CPUs (Note [Recordings
share the machine's CPUs] in ddpsim/record/cpus.py)."""
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from ddpsim.record import cpus
from faultinject import rank_processes

ALLOWED = sorted(os.sched_getaffinity(0))
needs_two = pytest.mark.skipif(len(ALLOWED) < 2, reason="needs at least 2 CPUs")


@pytest.fixture(autouse=True)
def own_registry(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the registry lives in tempfile.gettempdir()


@needs_two
def test_a_second_recording_takes_the_cpus_the_first_left():
    with cpus.reserved(1) as first, cpus.reserved(1) as second:
        assert first == [ALLOWED[0]] and second == [ALLOWED[1]]
        with cpus.reserved(len(ALLOWED)) as third:  # the least held first, then the rotation r % n
            assert third[:len(ALLOWED) - 2] == ALLOWED[2:] and sorted(third) == ALLOWED
    assert not cpus.registry().exists(), "each hands its CPUs back, and the last removes the file"


def test_the_cpus_of_a_launcher_that_died_are_free_again():
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    cpus.registry().write_text(json.dumps({f"{gone.pid}:x": [ALLOWED[0]] * 4}))
    with cpus.reserved(1) as mine:
        assert mine == [ALLOWED[0]]
        held = json.loads(cpus.registry().read_text())
        assert len(held) == 1 and next(iter(held)).startswith(f"{os.getpid()}:"), "the dead entry is dropped"


def test_an_unreadable_registry_counts_as_empty():
    cpus.registry().write_text("{not json")
    with cpus.reserved(2) as mine:
        assert mine == [ALLOWED[r % len(ALLOWED)] for r in range(2)]


def test_a_registry_not_ours_or_locked_too_long_leaves_rank_r_on_cpu_r_mod_n(monkeypatch):
    path = cpus.registry()
    path.write_text("{}")
    os.chmod(path, 0o666)  # anyone could have written it
    with cpus.reserved(2) as mine:
        assert mine is None
    os.chmod(path, 0o600)
    monkeypatch.setattr(cpus, "LOCK_WAIT_S", 0.2)
    fd = os.open(path, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a launcher that holds the lock (stopped, say)
    try:
        with cpus.reserved(1) as mine:
            assert mine is None
    finally:
        os.close(fd)


@needs_two
@pytest.mark.slow  # a real recording
def test_a_recording_beside_another_pins_its_ranks_elsewhere(tmp_path):
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record

    seen, done = {}, threading.Event()

    def watch():  # each rank's CPUs once it has pinned itself (a single one)
        while not done.is_set() and len(seen) < 2:
            for r, pid in rank_processes(os.getpid()).items():
                try:
                    mask = os.sched_getaffinity(pid)
                except OSError:
                    continue
                if len(mask) == 1:
                    seen.setdefault(r, mask)
            time.sleep(0.005)

    with cpus.reserved(1) as other:  # another recording's rank 0 holds the first CPU
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            trace = record(RecordConfig(model="mlp", world_size=2, iters=30), tmp_path / "run.json")
        finally:
            done.set()
            watcher.join()
    assert other == [ALLOWED[0]]
    assert seen[0] == {ALLOWED[1]} and seen[1] == {ALLOWED[0] if len(ALLOWED) == 2 else ALLOWED[2]}, seen
    assert "least used" in trace.meta["pinning"]["rule"]
    assert not cpus.registry().exists()
