"""An empty output path names no file (``Path("")`` is the current folder): every command refuses it in
one line before any work. ``calibrate --out ''`` read as "not given" overwrote the trace it calibrated.
(simulate, scaling, sweep, import, merge, export, published, ladder: in their commands' own tests.)"""
import subprocess
import sys

import pytest

from conftest import ROOT
from ddpsim.cli import main as cli
from ddpsim.samples import sample_path

MLP = str(sample_path("01_mlp_torch_default"))


@pytest.mark.parametrize("argv, said", [
    (["calibrate", "--trace", MLP, "--out", ""], "--out wants a file name"),
    (["calibrate", "--trace", MLP, "--save", ""], "--save wants a file name"),
    (["selfcheck", "--out", ""], "--out wants a folder name"),
    (["gpucheck", "--json", ""], "--json wants a file name"),
])
def test_a_command_refuses_an_empty_output_path(argv, said, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = open(MLP, "rb").read()
    assert cli(argv) == 2
    assert capsys.readouterr().err == f"ddpsim {argv[0]}: error: {said}, not an empty one\n"
    assert open(MLP, "rb").read() == before and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module, argv, said", [
    ("ddpsim.grade", ["part1", "assignments/part1/buckets.py", "--json", ""], "--json wants a path"),
    ("ddpsim.grade", ["part1", "assignments/part1/buckets.py", "--keep", ""], "--keep wants a path"),
    ("ddpsim.experiments.profile_variants", ["--out", ""], "--out wants a folder name"),
])
def test_the_module_commands_refuse_it_too(module, argv, said):
    done = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and said in done.stderr and len(done.stderr.strip().splitlines()) <= 2, done.stderr
