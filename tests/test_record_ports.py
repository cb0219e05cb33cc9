"""No recording listens on the network: only loopback sockets, from the CLI and from the dashboard's job."""
import ipaddress
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, child_env
from faultinject import iterations_written, rank_processes

LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def _address(hex_addr: str) -> ipaddress._BaseAddress:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # /proc prints IPv6 as 4 host-order words
    return ipaddress.IPv6Address(b"".join(words))


def listening(pid: int) -> list[str]:
    """Every address:port process ``pid`` listens on (TCP, IPv4 and IPv6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            if cols[3] == LISTEN and cols[9] in inodes:
                host, port = cols[1].split(":")
                found.append((_address(host), int(port, 16)))
    return found


def _loopback(addr) -> bool:
    mapped = getattr(addr, "ipv4_mapped", None)
    return addr.is_loopback or bool(mapped and mapped.is_loopback)


def sockets_during_training(cmd, out: Path, world: int) -> dict[int, list]:
    """Start ``cmd``, wait for its ranks to train, return rank -> listening sockets, then stop it."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while iterations_written(out, world) < 2 * world and time.monotonic() < deadline:
            time.sleep(0.05)
        assert iterations_written(out, world) >= 2 * world, "the ranks started training"
        return {r: listening(pid) for r, pid in rank_processes(proc.pid).items()}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def check_loopback_only(ranks: dict, world: int) -> None:
    assert sorted(ranks) == list(range(world))
    every = [s for socks in ranks.values() for s in socks]
    assert every, "gloo's listeners were found, so the check can see sockets"
    wide = [f"rank {r}: {a}:{p}" for r, socks in ranks.items() for a, p in socks if not _loopback(a)]
    assert wide == [], f"listening beyond loopback: {wide}"


@pytest.mark.slow
def test_cli_recording_listens_on_loopback_only(tmp_path):
    out = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "ddpsim", "record", "--model", "mlp", "--world-size", "2",
           "--iters", "100000", "--out", str(out)]
    check_loopback_only(sockets_during_training(cmd, out, 2), 2)


@pytest.mark.slow
def test_dashboard_recording_listens_on_loopback_only(tmp_path):
    """The Record page runs ddpsim.app.record_job (ddpsim.app.jobs); its ranks are checked the same way."""
    from ddpsim.record.config import RecordConfig

    out, status = tmp_path / "run.json", tmp_path / "status.json"
    cfg = RecordConfig(model="mlp", world_size=2, iters=100000).to_json()
    job = [sys.executable, "-m", "ddpsim.app.record_job", cfg, str(out), str(status)]
    check_loopback_only(sockets_during_training(job, out, 2), 2)
