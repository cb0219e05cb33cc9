"""--model path/to/file.py:factory: a model defined only here, in this test file."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn


class TwoTower(nn.Module):
    """Not in the zoo: two towers whose outputs are summed."""

    def __init__(self):
        super().__init__()
        self.left = nn.Linear(24, 48)
        self.right = nn.Linear(24, 48)
        self.head = nn.Linear(48, 3)

    def forward(self, a, b):
        return self.head(torch.relu(self.left(a) + self.right(b)))


def factory():
    def batch(iteration, rank, world_size, batch_size):
        g = torch.Generator().manual_seed(7919 * iteration + rank)
        a, b = torch.randn(batch_size, 24, generator=g), torch.randn(batch_size, 24, generator=g)
        return (a, b), torch.randint(0, 3, (batch_size,), generator=g)
    return TwoTower(), batch, nn.functional.cross_entropy


CONSOLE_SCRIPT = """import re
import sys
from ddpsim.__main__ import run
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(run())
"""  # what pip writes for pyproject.toml's [project.scripts] ddpsim = "ddpsim.__main__:run"


@pytest.mark.slow
def test_users_own_model_is_recorded(record, monkeypatch):
    spec = f"{os.path.abspath(__file__)}:factory"
    trace = record(model=spec, world_size=2, iters=3, batch_size=8)
    # Note [No paths in a trace]: the file by its name, in meta.model and meta.config.model alike (both held
    # this test's folder), and that name records the model again from the folder that holds it
    name = "test_record_user_model.py:factory"
    assert trace.complete and trace.meta["model"] == name and trace.meta["config"]["model"] == name
    assert os.path.dirname(__file__) not in json.dumps(trace.meta)
    from ddpsim.models import resolve_factory
    monkeypatch.chdir(os.path.dirname(__file__))
    assert resolve_factory(trace.meta["config"]["model"])()[0].__class__.__name__ == "TwoTower"
    assert [p["name"] if isinstance(p, dict) else p.name for p in trace.params] == [
        "left.weight", "left.bias", "right.weight", "right.bias", "head.weight", "head.bias"]
    it = trace.ranks[1].iterations[2]
    assert sorted(g.param for g in it.grad_ready) == list(range(6))
    assert it.buckets, "its gradients were allreduced"


@pytest.mark.slow
def test_the_installed_command_finds_a_module_in_the_current_folder(tmp_path):
    """``ddpsim record --model mymodule:factory`` as ``python -m ddpsim`` would: the console script's
    own folder, not the current one, is first on its sys.path."""
    from conftest import child_env

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ddpsim").write_text(CONSOLE_SCRIPT)
    (tmp_path / "towers.py").write_text("from test_record_user_model import factory\n")
    env = child_env()
    env["PYTHONPATH"] += os.pathsep + os.path.dirname(__file__)  # where towers.py finds the model
    result = subprocess.run([sys.executable, str(tmp_path / "bin" / "ddpsim"), "record", "--model", "towers:factory",
                             "--world-size", "2", "--iters", "2", "--batch-size", "8", "--out", "run.json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    trace = json.loads((tmp_path / "run.json").read_text())
    assert trace["meta"]["model"] == "towers:factory" and len(trace["params"]) == 6


def test_a_hook_file_is_named_without_its_folder_as_a_model_file_is():
    """Note [No paths in a trace] (record/meta.py): a comm hook given as a file is written by its file name
    in meta.options and meta.config, as a model file is (it kept '/x/myhook.py:make')."""
    from ddpsim.record import meta
    from ddpsim.record.config import RecordConfig

    h = meta.rank_header(RecordConfig(model="/x/towers.py:factory", comm_hook="/x/myhook.py:make"), "gloo", 2)
    assert (h["model"], h["config"]["model"]) == ("towers.py:factory", "towers.py:factory")
    assert (h["options"]["comm_hook"], h["config"]["comm_hook"]) == ("myhook.py:make", "myhook.py:make")
    plain = meta.rank_header(RecordConfig(model="mlp", comm_hook="fp16"), "gloo", 2)
    assert (plain["options"]["comm_hook"], plain["config"]["comm_hook"]) == ("fp16", "fp16")
