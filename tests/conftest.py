"""Shared test helpers (real recordings through ddpsim's launcher) and the session's set-up: the
order files run in, one scan of the installed packages for the app tests."""
import functools
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


# The two pytest-xdist workers take whole files (--dist loadfile) in collection order, each the next
# file when it is done: a file of a minute or two taken last runs on alone while the other worker
# idles. These files (each over 90 s of worker time in a run of the suite, --durations=0) go
# first, the longest first; the rest follow in name order. A stale list costs balance, never a result.
HEAVY_FIRST = ("test_assignments.py", "test_minddp_equivalence.py", "test_notebooks.py", "test_trace_fuzz.py",
               "test_app_all_traces.py", "test_app_record.py", "test_whatif_simulated_trace.py",
               "test_record_faults.py", "test_record_fidelity.py", "test_whatif.py", "test_import_sizes.py",
               "test_app_pages.py")


def pytest_collection_modifyitems(config, items):
    first = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: a file keeps its order


@pytest.fixture(autouse=True)
def _main_module_kept():
    """streamlit's AppTest runs its script as ``__main__`` and leaves it in ``sys.modules``; a rank started
    later in the same worker (multiprocessing's forkserver or spawn re-runs the parent's ``__main__`` from its
    file) then ran AppTest.from_function's temporary script and died: "NameError: name '__args' is not
    defined". Every test ends with the worker's own ``__main__``."""
    main = sys.modules.get("__main__")
    yield
    if main is not None:
        sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def _own_runs_folder(tmp_path, monkeypatch):
    """The app's recordings folder (ddpsim.app.jobs.runs_dir) is the test's own: the trace chooser
    lists what it holds, and a shared /tmp/ddpsim-runs would carry recordings from one test to another."""
    monkeypatch.setenv("DDPSIM_RUNS_DIR", str(tmp_path / "app-runs"))


@pytest.fixture(scope="session", autouse=True)
def _one_scan_of_installed_packages():
    """streamlit's AppTest looks through every installed distribution for custom components (their
    v2 manifests) each time a new AppTest runs: 0.3 s here, and every app test makes at least one.
    The installed packages do not change while the tests run, so the first scan's answer serves the
    rest of the session. (The app uses no custom component; the browser test's server
    scans for itself.)"""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:  # a streamlit without v2 components: nothing to scan
        yield
        return
    scan = functools.cache(manifest_scanner.scan_component_manifests)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(manifest_scanner, "scan_component_manifests", lambda max_workers=None: list(scan()))
        yield


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
