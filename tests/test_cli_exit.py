"""Note [A command exits without finalizing] (ddpsim/__main__.py): a command ends without tearing its
modules down, and loses nothing by it: its exit handlers run (multiprocessing's socket folder is
removed by one), threads that are not daemons finish, the output is all there and the status is the
command's."""
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, child_env

SIMULATE = ["simulate", "--arch", "resnet50", "--hardware", "v100-ib100", "--world-size", "8"]


def test_exit_handlers_and_threads_run_and_the_output_is_whole():
    code = ("import atexit, sys, threading, time\n"
            "atexit.register(print, 'exit handler ran', flush=True)\n"
            "threading.Thread(target=lambda: (time.sleep(2), print('thread done'))).start()\n"
            f"sys.argv = ['ddpsim', *{SIMULATE!r}]\n"
            "from ddpsim.__main__ import run\n"
            "run()\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env=child_env())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()  # the thread, still sleeping when the command returns, is waited for
    assert lines[0].startswith("simulated resnet50@v100-ib100: world size 8")
    assert [line for line in lines if line.startswith('{"iteration_time_s":')], "the command's last line"
    assert lines[-2:] == ["thread done", "exit handler ran"], lines[-3:]


def test_a_failing_command_keeps_its_status():
    result = subprocess.run([sys.executable, "-m", "ddpsim", *SIMULATE, "--iters", "0"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120, env=child_env())
    assert result.returncode == 2, result
    assert result.stderr == "ddpsim simulate: error: iters must be an integer >= 1, not 0\n", result.stderr
    usage = subprocess.run([sys.executable, "-m", "ddpsim", *SIMULATE, "--iters"], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env=child_env())  # argparse's error: one prefix for both
    assert usage.returncode == 2 and usage.stderr == ("ddpsim simulate: error: argument --iters: expected one "
                                                      "argument (see --help)\n"), usage.stderr


@pytest.mark.slow
def test_a_recording_leaves_no_folder_behind():
    """The launcher's forkserver socket folder (pymp-*) and its private rendezvous folder are removed."""
    tmp = Path(tempfile.mkdtemp(prefix="ddpsim-t-"))  # short: the forkserver's socket path must fit
    try:
        result = subprocess.run([sys.executable, "-m", "ddpsim", "record", "--model", "mlp", "--world-size", "2",
                                 "--iters", "2", "--out", str(tmp / "run.json")], cwd=ROOT, capture_output=True,
                                text=True, timeout=180, env=child_env(TMPDIR=str(tmp)))
        assert result.returncode == 0, result.stderr[-2000:]
        assert "exposed comm" in result.stdout
        left = [p.name for p in tmp.iterdir() if p.name.startswith(("pymp-", "ddpsim-"))]
        assert left == [], left
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
