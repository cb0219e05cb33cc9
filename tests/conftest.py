"""Shared test helpers: real recordings through ddpsim's launcher."""
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from childenv import child_env  # noqa: E402 - the tests import it from here

# ranks and commands that tests start from another folder find this checkout's ddpsim
if str(ROOT) not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = child_env()["PYTHONPATH"]


@pytest.fixture(autouse=True)
def _own_runs_folder(tmp_path, monkeypatch):
    """The app's recordings folder (ddpsim.app.jobs.runs_dir) is the test's own: the trace chooser
    lists what it holds, and a shared /tmp/ddpsim-runs would carry recordings from one test to another."""
    monkeypatch.setenv("DDPSIM_RUNS_DIR", str(tmp_path / "app-runs"))


def record_run(tmp_path, name="run", **options):
    """Record a real run (real processes, real gloo) and return the loaded Trace."""
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record

    cfg = RecordConfig(**options)
    return record(cfg, Path(tmp_path) / f"{name}.json")


@pytest.fixture
def record(tmp_path):
    return lambda **options: record_run(tmp_path, **options)


def live_pids(pids):
    """The pids that still exist (zombies excluded)."""
    alive = []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] != "Z":
                    alive.append(pid)
        except FileNotFoundError:
            pass
    return alive
