"""Profiles imported together must be one DDP job (ddpsim/trace/profile_job.py): one file per rank,
the same gradients and buckets on every rank, the same kind of device, steps that overlap in time.

The fixtures are the bundled H100 ResNet-18 profiles (two gloo ranks), one of them altered as a
mixed-up log folder would give it: a file on another clock (shifted by seconds), another model's,
a file without its GPU events, a different bucket or gradient shape.
"""
import gzip
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from ddpsim.samples import H100_DIR
from ddpsim.trace import TraceFormatError
from ddpsim.trace.profile_import import import_profiles

R18 = [H100_DIR / f"resnet18_gloo_ws2_rank{r}.kineto.json.gz" for r in (0, 1)]
R50 = H100_DIR / "resnet50_nccl_ws1_rank0.kineto.json.gz"


def altered(src, dst, change):
    """``src``'s profile with ``change(data)`` applied, written to ``dst``."""
    data = json.loads(gzip.decompress(src.read_bytes()))
    change(data)
    dst.write_text(json.dumps(data))
    return dst


def ops(data, name):
    return [e for e in data["traceEvents"] if e.get("ph") == "X" and e.get("name") == name]


def test_the_bundled_ranks_are_one_job():
    trace = import_profiles(R18)
    assert trace.meta["clock"]["method"] == "kineto-shared"
    assert not [n for n in trace.meta["import_notes"] if n.startswith("caution")]


def test_two_files_for_one_rank_name_both(tmp_path):
    copy = altered(R18[0], tmp_path / "again.json", lambda d: None)
    with pytest.raises(TraceFormatError, match=r"resnet18_gloo_ws2_rank0.kineto.json.gz and .*again.json both claim rank 0"):
        import_profiles([R18[0], copy, R18[1]])


def test_another_models_profile_is_refused(tmp_path):
    def as_rank1(d):
        d["distributedInfo"] = {**d["distributedInfo"], "rank": 1, "world_size": 2}
    other = altered(R50, tmp_path / "r50_as_rank1.json", as_rank1)
    with pytest.raises(TraceFormatError, match="makes 62 gradients per step but rank 1's .* 161: profiles of different"):
        import_profiles([R18[0], other])


def test_a_gradient_of_another_shape_is_refused(tmp_path):
    def reshape(d):
        for op in ops(d, "torch::autograd::AccumulateGrad")[:1]:  # the first step's first gradient
            op["args"]["Input Dims"] = [[7, 7]]
    with pytest.raises(TraceFormatError, match="gradients of different shapes"):
        import_profiles([R18[0], altered(R18[1], tmp_path / "r1.json", reshape)])


def test_buckets_of_other_sizes_are_refused(tmp_path):
    def resize(d):
        for op in ops(d, "c10d::allreduce_"):
            dims = op["args"]["Input Dims"]
            dims[0][0] = [dims[0][0][0] + 1]
    with pytest.raises(TraceFormatError, match="DDP gives every rank the same buckets"):
        import_profiles([R18[0], altered(R18[1], tmp_path / "r1.json", resize)])


def test_a_profile_without_gpu_work_beside_one_with_is_refused(tmp_path):
    def cpu_only(d):
        d["traceEvents"] = [e for e in d["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    with pytest.raises(TraceFormatError, match="rank 0's profile .* has GPU work but rank 1's .* has none"):
        import_profiles([R18[0], altered(R18[1], tmp_path / "r1.json", cpu_only)])


def test_a_rank_10_s_later_is_moved_back_by_its_allreduces_and_said(tmp_path):
    """Rank 1's file on a clock 10 s ahead: its steps cannot overlap rank 0's on the profiles' clocks
    (Note [One job's ranks overlap in every synchronised step]), but its allreduces end 10 s after rank
    0's (Note [A collective ends at once on every rank] in ddpsim/trace/clock_align.py): it is moved
    back by that, and the CLI prints how. Read on one clock, the iteration would be 10 s long."""
    def later(d):
        for e in d["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += 10e6
    shifted = altered(R18[1], tmp_path / "r1_later.json", later)
    trace = import_profiles([R18[0], shifted])
    assert trace.meta["clock"]["method"] == "collective-ends"
    assert abs(trace.meta["clock"]["offsets_ns"]["1"] - 10e9) < 1e5
    said = [n for n in trace.meta["import_notes"] if n.startswith("clock: ")]
    assert len(said) == 1 and "rank 1 +10.000060 s" in said[0]
    for a, b in zip(trace.ranks[1].iterations, import_profiles(R18).ranks[1].iterations):
        assert abs(a.backward.duration_ns - b.backward.duration_ns) < 1e6  # ms: the rank's own times kept
    out = subprocess.run([sys.executable, "-m", "ddpsim", "import", str(R18[0]), str(shifted), "--out",
                          str(tmp_path / "t.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and said[0] in out.stdout.splitlines()
    assert float(out.stdout.split("iteration ")[1].split(" ms")[0]) < 200


def test_a_missing_rank_is_said(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ddpsim", "import", str(R18[1]), "--out", str(tmp_path / "t.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "caution: the profiles are of world size 2 but no profile of rank(s) 0 is among them" in out.stdout


def _profile_branchy_rank(rank, world, out_dir):
    """A real gloo DDP run under torch.profiler with find_unused_parameters, rank 1 leaving a
    branch out of every step: one job whose ranks make different numbers of gradients."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    trunk, branch = nn.Linear(16, 16), nn.Linear(16, 16)
    model = nn.ModuleDict({"trunk": trunk, "branch": branch})
    ddp = nn.parallel.DistributedDataParallel(_Branchy(model, use_branch=rank == 0), find_unused_parameters=True)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                record_shapes=True) as prof:
        for _ in range(4):
            ddp(torch.randn(8, 16)).sum().backward()
            prof.step()
    prof.export_chrome_trace(f"{out_dir}/rank{rank}.json")


class _Branchy(__import__("torch").nn.Module):
    def __init__(self, parts, use_branch):
        super().__init__()
        self.parts, self.use_branch = parts, use_branch

    def forward(self, x):
        h = self.parts["trunk"](x)
        return self.parts["branch"](h) if self.use_branch else h


@pytest.mark.slow
def test_ranks_that_leave_out_parameters_under_find_unused_are_one_job(tmp_path):
    from distutil import run_ranks

    run_ranks(_profile_branchy_rank, 2, args=(str(tmp_path),), timeout=300)
    trace = import_profiles([tmp_path])
    grads = [len(r.iterations[0].grad_ready) for r in trace.ranks]
    assert grads == [4, 2] and all(it.bitmap_allreduce for r in trace.ranks for it in r.iterations)
    # the bitmap is told from the bucket by gloo's run of it (int), not counted as a second bucket
    assert {len(it.buckets) for r in trace.ranks for it in r.iterations} == {1}


def test_gloo_runs_are_paired_with_their_launches_by_shape():
    """gloo runs collectives on two threads: under load the used-parameter map's run (4 ints) started
    before the bucket's (544 floats) launched just ahead of it, and pairing by position made the bucket
    the bitmap and the bitmap a 16-byte bucket (rank 0: buckets of [2176, 16] bytes, rank 1: [2176])."""
    from ddpsim.trace.kineto import Op, pair_gloo_runs
    from ddpsim.trace.profile_sizes import is_bitmap

    def launch(n, t):
        return Op("c10d::allreduce_", "cpu_op", 1, 1, t, t + 1, {"Input Dims": [[[n]], [], []],
                                                                 "Input type": ["TensorList", "", ""]})

    def run(n, kind, t):
        return Op("gloo:all_reduce", "cpu_op", 1, 2, t, t + 50, {"Input Dims": [[n]], "Input type": [kind]})

    bucket, bitmap = launch(544, 10), launch(4, 12)
    early_map, late_bucket = run(4, "int", 13), run(544, "float", 14)
    pairs = pair_gloo_runs([bucket, bitmap], [early_map, late_bucket])
    assert pairs == [late_bucket, early_map]
    assert [is_bitmap(op, None, r) for op, r in zip([bucket, bitmap], pairs)] == [False, True]
    assert pair_gloo_runs([bucket, bitmap], [early_map]) == [None, early_map]  # a run the profiler missed
