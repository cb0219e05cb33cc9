"""``kill`` (SIGTERM) of a recording's launcher leaves nothing behind: no rank, no private folder."""
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, child_env
from devtools import group_alive
from faultinject import alive, iterations_written, rank_processes


@pytest.mark.slow
def test_sigterm_to_the_launcher_stops_its_ranks_and_removes_its_folder(tmp_path):
    tmp, out = tmp_path / "tmp", tmp_path / "run.json"
    tmp.mkdir()
    cmd = [sys.executable, "-m", "ddpsim", "record", "--model", "mlp", "--world-size", "2",
           "--iters", "100000", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(TMPDIR=str(tmp)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while iterations_written(out, 2) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        ranks = list(rank_processes(proc.pid).values())
        assert len(ranks) == 2 and ours(tmp), "training, with the private rendezvous folder in TMPDIR"
        proc.send_signal(signal.SIGTERM)  # the launcher alone, as `kill PID` does
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130 and "interrupted" in err
    assert [p for p in ranks if alive(p)] == []
    assert ours(tmp) == [] and not list(tmp.glob("pymp-*")), "the private folder and the server's socket folder"
    deadline = time.monotonic() + 5
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert group_alive(proc.pid) == [], "nothing of the launcher's is left (its forkserver ends with it)"


def ours(tmp):
    return [p.name for p in tmp.iterdir() if p.name.startswith("ddpsim-")]  # torch keeps its own caches there
