"""``ddpsim selfcheck``: the recorder's checks, on a real GPU recording and on a real CPU run here.

The GPU recording is the bundled sample made by ``record`` on an H200 (``selfcheck --gpu``);
the checks must pass on it and catch each fault planted in a copy of it.
"""
import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ddpsim.experiments.selfcheck import forward_lags_us, lag_problems, trace_problems
from ddpsim.samples import BUNDLED_DIR
from ddpsim.trace import from_dict, load_trace

ROOT = Path(__file__).resolve().parents[1]
GPU_SAMPLE = BUNDLED_DIR / "11_h200_resnet50_nccl_1rank.json"


def _raw():
    return json.loads(GPU_SAMPLE.read_text())


def test_resnet50_has_the_published_parameter_table():
    from ddpsim.models.resnet import ResNet50
    from ddpsim.sim.archs import resnet50

    with torch.device("meta"):
        model = ResNet50()
    table, _ = resnet50()
    assert [(n, list(p.shape)) for n, p in model.named_parameters()] == [(t["name"], t["shape"]) for t in table]
    assert sum(p.numel() for p in model.parameters()) == 25_557_032


def test_the_gpu_recording_passes_every_check():
    raw = _raw()
    assert raw["meta"]["backend"] == "nccl" and raw["meta"]["timebase"]["grad_ready"] == "gpu"
    assert trace_problems(from_dict(raw), gpu=True, iters=8) == []
    lags = forward_lags_us(raw)
    assert len(lags) == 8 and lag_problems(lags) == []


def test_a_recording_that_disagrees_with_torchs_logger_is_caught():
    """The H200 run with torch's logger timing its communication 5 ms longer than the recording did
    (Note [Torch's logger as a second clock]): that one disagreement is the only problem."""
    raw = _raw()
    raw["ranks"][0]["ddp_logging_data"]["backward_comm_time"] += 5_000_000
    problems = trace_problems(from_dict(raw), gpu=True, iters=8)
    assert len(problems) == 1 and problems[0].startswith("rank 0 iteration 6: communication 19.") \
        and problems[0].endswith("ms by torch's own DDP logger"), problems
    raw = _raw()
    raw["ranks"][0]["ddp_logging_data"] = None  # a recording of torch's DDP without its logger's timings
    assert trace_problems(from_dict(raw), gpu=True, iters=8) == [
        "torch's DDP logger timed an iteration on 0 of 1 ranks"]


def test_a_gradient_outside_its_backward_is_caught():
    raw = _raw()
    it = raw["ranks"][0]["iterations"][3]
    it["grad_ready"][5]["t_ns"] = it["backward"]["end_ns"] + 1_000_000
    problems = trace_problems(from_dict(raw), gpu=True, iters=8)
    assert problems[0].startswith("rank 0 iteration 3: parameter") and "outside the backward" in problems[0]


def test_an_allreduce_before_its_last_gradient_is_caught():
    raw = _raw()
    it = raw["ranks"][0]["iterations"][4]
    bucket = it["buckets"][1]
    bucket["launch_ns"] -= 500_000  # half a millisecond too early
    problems = trace_problems(from_dict(raw), gpu=True, iters=8)
    assert any("bucket 1 launched" in p and "before its last gradient" in p for p in problems)


def test_cpu_timebase_and_missing_iterations_are_caught():
    raw = _raw()
    cpu = copy.deepcopy(raw)
    cpu["meta"]["timebase"]["grad_ready"] = "cpu"
    assert trace_problems(from_dict(cpu), gpu=True, iters=8)[0].startswith("timebase is")
    raw["ranks"][0]["iterations"].pop()
    assert trace_problems(from_dict(raw), gpu=True, iters=8) == ["rank 0: 7 of 8 iterations (incomplete)"]


def test_a_gpu_time_before_its_host_queue_time_is_caught():
    lags = forward_lags_us(_raw())
    assert "precedes its host queue time" in lag_problems(lags[:-1] + [(-50.0, 0.0)])[0]
    assert "after it was queued" in lag_problems([(5000.0, 0.0)] * 8)[0]


def test_a_gpu_start_early_by_less_than_the_anchors_uncertainty_passes():
    """The host/GPU mapping is good to half the anchor's window (Note [Host clock alignment]): seen on
    an H200, gloo --device cuda x2, a forward 8.6 us "before" its queue time, with windows of 15-24 us."""
    assert lag_problems([(3.0, 1.0), (-8.6, 9.0)]) == []
    assert "uncertainty (2.0 us)" in lag_problems([(3.0, 1.0), (-8.6, 2.0)])[0]


def _run(*args):
    return subprocess.run([sys.executable, "-m", "ddpsim", "selfcheck", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_gpu_selfcheck_without_cuda_is_one_line():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = _run("--gpu")
    assert p.returncode == 2 and "needs CUDA" in p.stderr and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_cpu_selfcheck_records_checks_and_compares_with_the_profiler(tmp_path):
    p = _run("--out", str(tmp_path), "--iters", "4")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    report = json.loads(p.stdout.strip().splitlines()[-1])
    assert report["ok"] and [c["check"] for c in report["checks"]] == ["gloo cpu convnet x2",
                                                                       "profiler truth convnet x2"]
    truth = report["checks"][1]
    assert truth["grad_ready"]["n"] > 0 and truth["allreduce_end"]["n"] > 0
    # The iterations were paired right: one pair off by an iteration would move its clock offset by a whole
    # iteration; a preemption in one window (a few ms on 2 busy cores) may not fail it.
    run = load_trace(tmp_path / "truth" / "run.json")
    iteration_ms = min(it.optimizer.end_ns - it.forward.start_ns for r in run.ranks for it in r.iterations) / 1e6
    assert truth["offset_spread_ms"] < iteration_ms / 2, (truth["offset_spread_ms"], iteration_ms)
    assert (tmp_path / "gloo_cpu_convnet_x2.json").is_file() and (tmp_path / "truth" / "profile_rank0.json").is_file()


def test_profiler_truth_leaves_out_allreduces_that_ran_no_kernel():
    """Note [No kernel, no truth]: NCCL at one rank runs no allreduce kernel; the importer's zero-length
    stand-in at the bucket's ready time is not compared (it made the recorder look 10-110 us late)."""
    from ddpsim.experiments import profiler_truth

    raw = _raw()
    same = profiler_truth.compare(from_dict(raw), from_dict(copy.deepcopy(raw)))
    assert (same["allreduce_start"]["n"], same["allreduce_start"]["median_abs_ms"], same["allreduce_no_kernel"]) == (15, 0, 0)
    imported = copy.deepcopy(raw)
    for it in imported["ranks"][0]["iterations"]:
        for b in it["buckets"]:
            b["launch_ns"] = b["complete_ns"] = b["ready_ns"]
    res = profiler_truth.compare(from_dict(raw), from_dict(imported))
    assert (res["allreduce_no_kernel"], res["allreduce_start"]["n"], res["grad_ready"]["median_abs_ms"]) == (15, 0, 0)
    assert res["problems"] == []
    raw["meta"]["world_size"] = 2  # with two ranks a missing kernel is the profile's fault: said, not skipped quietly
    res = profiler_truth.compare(from_dict(raw), from_dict(imported))
    assert res["allreduce_no_kernel"] == 0 and "has no GPU kernel in the profile" in res["problems"][0]
