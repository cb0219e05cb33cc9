"""The repository stands alone: nothing in it names a folder outside it or of the machine that
made it (Note [No paths in a trace] in ddpsim/record/meta.py), and it installs as a package."""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, child_env
from ddpsim.record.meta import portable_command
from ddpsim.samples import BUNDLED_DIR

# a folder beside the checkout, or a build machine's own folders (written so that this line
# does not match itself: `git grep` for those paths finds nothing in the repository)
OUTSIDE = re.compile(r"[.][.]/shared|/(work|home|root|Users)/")
SKIP_DIRS = {".git", ".venv", "__pycache__", "artifacts", "runs", ".hypothesis", ".pytest_cache"}


def repository_text_files():
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if name == ".git":  # a worktree's pointer to its repository
                continue
            path = Path(folder) / name
            try:
                yield path, path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue  # binary: images, compressed profiles


def test_no_file_names_a_folder_outside_the_repository():
    found = [f"{p.relative_to(ROOT)}: {m.group(0)!r}" for p, text in repository_text_files()
             for m in [OUTSIDE.search(text)] if m]
    assert not found, found


def test_a_command_line_is_written_without_folders():
    assert portable_command(["/x/ddpsim/record/worker.py", '[{"model": "mlp"}]', "/x/out/run.json.rank0.jsonl"]) \
        == 'python -m ddpsim.record.worker [{"model": "mlp"}] run.json.rank0.jsonl'
    assert portable_command(["/srv/ddpsim/ddpsim/__main__.py", "record", "--out=/srv/o/run.json", "--iters", "3"]) \
        == "python -m ddpsim record --out=run.json --iters 3"
    assert portable_command(["/venv/bin/ddpsim", "record", "--out", "rel/run.json"]) \
        == "python -m ddpsim record --out rel/run.json"


def test_bundled_traces_name_no_folder():
    traces = sorted(BUNDLED_DIR.glob("*.json")) + [ROOT / "assignments" / "part3" / "baseline.json"]
    for path in traces:
        meta = json.loads(path.read_text())["meta"]
        assert not any(os.path.isabs(t) for t in meta.get("command", "").split(" ")), path
        assert all("/" not in f for f in meta.get("imported_from", [])), path


def test_the_package_metadata_pins_its_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"] + sum(project["optional-dependencies"].values(), [])
    assert all("==" in d for d in deps), deps  # pinned, as requirements.txt always was
    assert project["scripts"]["ddpsim"] == "ddpsim.__main__:run"
    assert "-e .[test,notebooks]" in (ROOT / "requirements.txt").read_text().splitlines()


def test_the_wheel_holds_every_file_ddpsim_reads(tmp_path):
    """Built from a copy of the checkout (setuptools builds in the source folder)."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "ddpsim", src / "ddpsim", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                             "-q", "-w", str(tmp_path / "dist"), str(src)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    with zipfile.ZipFile(next((tmp_path / "dist").glob("ddpsim-*.whl"))) as wheel:
        names = set(wheel.namelist())
        entry_points = next(wheel.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    want = {p.relative_to(src).as_posix() for p in (src / "ddpsim").rglob("*") if p.is_file()}
    assert want - names == set()
    assert "ddpsim = ddpsim.__main__:run" in entry_points


def test_the_ddpsim_command_runs_from_another_folder(tmp_path):
    """What the installed ``ddpsim`` script runs: ``ddpsim.__main__.run`` (here on PYTHONPATH)."""
    code = "import sys; sys.argv = ['ddpsim', '--help']; from ddpsim.__main__ import run; run()"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env=child_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: ddpsim ") and "gpucheck" in result.stdout


@pytest.mark.slow
def test_record_from_another_folder_writes_run_json_there_naming_no_folder(tmp_path):
    """``ddpsim record`` started outside the checkout: the ranks find the package (forked from a
    server given the launcher's sys.path), the trace lands in ./run.json, and names no folder; its
    command is the one that made it (the launcher's, which a forked rank keeps as sys.argv)."""
    result = subprocess.run([sys.executable, "-m", "ddpsim", "record", "--model", "mlp", "--world-size", "2",
                             "--iters", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                            env=child_env())
    assert result.returncode == 0, result.stderr[-2000:]
    text = (tmp_path / "run.json").read_text()
    assert str(tmp_path) not in text and str(ROOT) not in text
    assert json.loads(text)["meta"]["command"] == "python -m ddpsim record --model mlp --world-size 2 --iters 2"
    # the README's tour: it prints the iteration time, the exposed communication and the overlap
    assert re.search(r"iteration [\d.]+ ms, exposed comm [\d.]+ ms, overlap \d+%", result.stdout), result.stdout


def test_commands_other_than_record_start_without_torch():
    """Only ``record`` needs torch (2-5 s to import): the CLI loads every command's arguments, so a
    command module imports torch inside the function that uses it, never at the top."""
    sample = ROOT / "ddpsim" / "samples" / "01_mlp_torch_default.json"
    code = ("import atexit, sys, runpy; sys.argv = ['ddpsim', 'simulate', '--trace', sys.argv[1]]\n"
            "atexit.register(lambda: print('torch' in sys.modules))  # the command ends the process\n"
            "runpy.run_module('ddpsim', run_name='__main__')")
    result = subprocess.run([sys.executable, "-c", code, str(sample)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False", result.stdout
