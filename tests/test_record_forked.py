"""CPU ranks forked from a server that imported torch (ddpsim/record/forked.py): they are not the
launcher's children, a caller's script is not run again in them, and they die with the launcher."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, child_env
from devtools import end_group
from faultinject import alive_after, iterations_written, parent_of, rank_processes


@pytest.mark.slow
def test_cpu_ranks_are_forked_from_one_server(tmp_path):
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record

    out, parents, done = tmp_path / "run.json", {}, threading.Event()

    def watch():  # each rank's parent, read while it runs
        while not done.is_set() and len(parents) < 2:
            for r, pid in rank_processes(os.getpid()).items():
                if (parent := parent_of(pid)) is not None:
                    parents.setdefault(r, parent)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        trace = record(RecordConfig(model="mlp", world_size=2, iters=30), out)
    finally:
        done.set()
        watcher.join()
    assert trace.complete and len(parents) == 2
    server = parents[0]
    assert server is not None and server != os.getpid() and parents[1] == server, (os.getpid(), parents)
    assert parent_of(server) == os.getpid(), "the server is this process's child (multiprocessing's forkserver)"


@pytest.mark.slow
def test_a_script_without_a_main_guard_records_once(tmp_path):
    """Note [A rank runs none of the caller's script]: multiprocessing would run it again in each rank."""
    script = tmp_path / "myrun.py"
    script.write_text("from ddpsim.record.config import RecordConfig\n"
                      "from ddpsim.record.launcher import record\n"
                      "print('top level ran', flush=True)\n"
                      "record(RecordConfig(model='mlp', world_size=2, iters=2), 'run.json')\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=180, env=child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("top level ran") == 1
    assert json.loads((tmp_path / "run.json").read_text())["meta"]["command"] == "python -m myrun", "forked ranks"


@pytest.fixture
def short_tmp():
    """A folder for a child's TMPDIR, of a short path: the forkserver's socket in it must fit in 107
    bytes (under tmp_path with two workers it did not, and the ranks were started instead of forked)."""
    tmp = Path(tempfile.mkdtemp(prefix="ddpsim-t-"))
    yield tmp
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
def test_ranks_and_their_server_die_with_a_killed_launcher(tmp_path, short_tmp, monkeypatch):
    """SIGKILL to the launcher alone (no clean-up): its server sees it go and exits, and each rank's
    PR_SET_PDEATHSIG (process.die_with_parent) follows the server. Its private folder (the FileStore,
    the heartbeats) stays behind, and a later launch removes it once it is ``ranks.STALE_S`` old."""
    from ddpsim.ranks import STALE_S, private_folder

    out, tmp = tmp_path / "run.json", short_tmp
    cmd = [sys.executable, "-m", "ddpsim", "record", "--model", "mlp", "--world-size", "2",
           "--iters", "100000", "--out", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**child_env(), "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while iterations_written(out, 2) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        ranks = list(rank_processes(proc.pid).values())
        server = {parent_of(pid) for pid in ranks}
        assert len(ranks) == 2 and len(server) == 1 and proc.pid not in server, "training, forked"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert alive_after(ranks + list(server), 10) == []
    finally:
        end_group(proc, grace_s=0)
    left = list(tmp.glob(f"ddpsim-rdzv-{proc.pid}-*"))
    assert len(left) == 1, list(tmp.iterdir())
    live = tmp / f"ddpsim-rdzv-{os.getpid()}-live"  # a running launcher's, as old: kept
    live.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    for folder, age in ((left[0], STALE_S - 60), (left[0], STALE_S + 60), (live, STALE_S + 60)):
        os.utime(folder, (time.time() - age,) * 2)
        mine = private_folder("rdzv")  # what the next launch does
        os.rmdir(mine)
        if age < STALE_S:
            assert left[0].exists(), "kept while it may be a caller's in another PID namespace"
    assert not left[0].exists() and live.exists()
