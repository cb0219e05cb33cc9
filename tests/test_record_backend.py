"""The backend rule: NCCL only with a GPU for every local rank, else gloo; bad choices are one line.

The rule is a pure function of the node's GPU count (tested for 0, 1 and 8 GPUs here, no GPU
needed); the command-line errors are checked on this machine's real GPU count.
"""
import subprocess
import sys

import pytest

from conftest import ROOT
from ddpsim.errors import CLIError
from ddpsim.record.config import RecordConfig
from ddpsim.record.placement import choose_backend, local_ranks, visible_gpus


@pytest.mark.parametrize("backend, device, local, gpus, want", [
    (None, None, 2, 0, ("gloo", "cpu")),  # no GPU
    (None, None, 2, 1, ("gloo", "cpu")),  # 1 GPU, 2 ranks: never NCCL (the crash)
    (None, None, 1, 1, ("nccl", "cuda")),
    (None, None, 8, 8, ("nccl", "cuda")),
    (None, None, 4, 8, ("nccl", "cuda")),
    (None, "cpu", 1, 8, ("gloo", "cpu")),  # --device cpu keeps the default off the GPUs
    (None, "cuda", 2, 1, ("gloo", "cuda")),  # GPUs shared by gloo ranks
    ("gloo", None, 2, 8, ("gloo", "cpu")),
    ("gloo", "cuda", 4, 1, ("gloo", "cuda")),
    ("nccl", None, 2, 2, ("nccl", "cuda")),
])
def test_backend_rule(backend, device, local, gpus, want):
    p = choose_backend(backend, device, local, gpus)
    assert (p.backend, p.device) == want
    assert "\n" not in p.line() and p.reason
    if (backend, device, want[0]) == (None, None, "gloo") and gpus:
        assert "NCCL needs one GPU per rank" in p.reason


@pytest.mark.parametrize("backend, device, local, gpus, message", [
    ("nccl", None, 2, 1, "--backend nccl needs one GPU per local rank, but this node has 2 local ranks "
                         "and 1 visible GPU"),
    ("nccl", None, 1, 0, "--backend nccl needs one GPU per local rank, but this node has 1 local rank "
                         "and 0 visible GPUs; use --backend gloo"),
    ("nccl", "cpu", 1, 1, "--backend nccl needs CUDA tensors"),
    (None, "cuda", 1, 0, "--device cuda needs CUDA"),
    ("gloo", "cuda", 2, 0, "--device cuda needs CUDA"),
])
def test_impossible_choices_are_one_line_errors(backend, device, local, gpus, message):
    with pytest.raises(CLIError) as e:
        choose_backend(backend, device, local, gpus)
    assert message in str(e.value) and "\n" not in str(e.value)
    if not gpus:  # no GPU: the advice is gloo on the CPU, not --device cuda or fewer ranks
        assert "with --device cuda" not in str(e.value) and "fewer ranks" not in str(e.value), str(e.value)


def test_cuda_that_does_not_work_counts_as_no_gpu():
    assert choose_backend(None, None, 1, 4, cuda_ok=False).backend == "gloo"


def test_local_ranks_come_from_torchrun(monkeypatch):
    for var in ("LOCAL_WORLD_SIZE", "RANK", "DDPSIM_LAUNCHED"):
        monkeypatch.delenv(var, raising=False)
    assert local_ranks(16) == 16  # ddpsim's own launcher: every rank is local
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert local_ranks(16) == 16  # a variable left by some outer job does not count
    monkeypatch.setenv("RANK", "5")
    assert local_ranks(16) == 4  # torchrun on 4 nodes of 4
    monkeypatch.setenv("DDPSIM_LAUNCHED", "1")
    assert local_ranks(16) == 16  # a rank started by ddpsim's launcher


def test_default_config_never_picks_nccl_without_a_gpu_per_rank():
    """What record, validate --grid and the tests use when no backend is given."""
    gpus, ok = visible_gpus()
    world = (gpus if ok else 0) + 1  # one rank more than this node has GPUs
    assert RecordConfig(world_size=world).validate().resolved_backend() == "gloo"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "ddpsim", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_nccl_with_too_few_gpus_is_one_line_before_any_process(tmp_path):
    gpus, ok = visible_gpus()
    world = (gpus if ok else 0) + 1
    result = cli("record", "--backend", "nccl", "--world-size", str(world), "--out", str(tmp_path / "r.json"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "--backend nccl needs one GPU per local rank" in lines[0]
    assert list(tmp_path.iterdir()) == [], "no rank was started, nothing was written"


def test_device_cuda_without_cuda_is_one_line(tmp_path):
    if visible_gpus()[1]:
        pytest.skip("this node has CUDA")
    result = cli("record", "--device", "cuda", "--out", str(tmp_path / "r.json"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and "--device cuda needs CUDA" in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_record_says_which_backend_and_why(tmp_path):
    out = tmp_path / "r.json"
    result = cli("record", "--world-size", "1", "--iters", "1", "--device", "cpu", "--out", str(out))
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "backend" in line]
    assert said == ["ddpsim record: backend gloo on cpu: default: --device cpu"]
    from ddpsim import load_trace
    meta = load_trace(out).meta
    assert meta["backend"] == "gloo" and meta["placement"]["device"] == "cpu"


def test_cpu_ranks_get_the_launchers_placement_and_no_gpu(monkeypatch):
    """Note [CPU ranks see no GPU]: torch's PowerSGD hook failed on CPU tensors where CUDA was visible
    (an H200 box, torch 2.11); the launcher hides the GPUs from CPU ranks and hands over its placement."""
    from ddpsim.record.placement import Placement

    cpu, cuda = Placement("gloo", "cpu", "requested, 2 local ranks and 1 visible GPU"), Placement("nccl", "cuda", "x")
    assert cpu.rank_env()["CUDA_VISIBLE_DEVICES"] == "" and "CUDA_VISIBLE_DEVICES" not in cuda.rank_env()
    monkeypatch.setenv(Placement.ENV, cpu.rank_env()[Placement.ENV])
    monkeypatch.setenv("DDPSIM_LAUNCHED", "1")
    assert Placement.for_rank(RecordConfig(world_size=2)) == cpu
    monkeypatch.delenv("DDPSIM_LAUNCHED")  # a variable that leaked into a torchrun rank is not read
    assert Placement.for_rank(RecordConfig(world_size=2)) == RecordConfig(world_size=2).placement()
    monkeypatch.delenv(Placement.ENV)
    assert Placement.for_rank(RecordConfig(world_size=2)) == RecordConfig(world_size=2).placement()
