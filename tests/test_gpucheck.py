"""The GPU check on real H100 traces (../shared/gpu-traces, beside the clone): the workload
learnt from a Kineto profile's GPU kernels, simulated, against the CUDA events of the same
iterations (``ddpsim gpucheck``; issue 15: within 10% median)."""
import json
from pathlib import Path

import pytest

from ddpsim.cli import main as cli

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "gpu-traces"
pytestmark = pytest.mark.skipif(not (TRACES / "resnet50_nccl_ws1_rank0.truth.json").is_file(),
                                reason=f"the GPU traces are not at {TRACES} (../shared/gpu-traces beside the clone)")


def test_backward_and_ready_times_within_ten_percent(capsys):
    assert cli(["gpucheck", str(TRACES), "--models", "resnet50,vit_b_16"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[0].split()[:2] == ["model", "rank"]  # the table, then the JSON
    rows = {r["model"]: r for r in json.loads(out[-1])}
    assert set(rows) == {"resnet50", "vit_b_16"}
    for r in rows.values():
        assert r["ready_params"] >= 140  # nearly every parameter compared (161 and 152 in all)
        assert abs(r["backward_rel_error"]) <= 0.10, r
        assert r["ready_median_abs_error"] <= 0.10, r
        assert r["iterations"] == [4, 5, 6]  # the profiled iterations, compared with their own events


def test_unknown_model_and_missing_folder_are_one_line_errors(tmp_path, capsys):
    assert cli(["gpucheck", str(TRACES), "--models", "alexnet"]) == 2
    assert cli(["gpucheck", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown model 'alexnet'" in err[0] and "lacks" in err[1]
