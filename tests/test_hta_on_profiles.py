"""HolisticTraceAnalysis run on the user's own profiler traces, not on ddpsim's export, and
ddpsim's import of the same files: the same overlap per rank, once HTA is told to keep the last
step (``include_last_profiler_step=True``; by default it leaves out the kernels launched after the
last ProfilerStep starts, and ddpsim's import keeps every step).

HTA counts NCCL's kernels as communication, and a gloo run launches none, so the fixtures are the
bundled H100 ResNet-18 profiles (two gloo ranks) with each bucket's device<->host copies drawn as
the one NCCL kernel an NCCL run would show over the same span, on a stream of its own.
"""
import gzip
import json
import logging
import os

import pytest

from ddpsim.analysis import comm_weighted_overlap
from ddpsim.samples import H100_DIR
from ddpsim.trace.kineto import Profile, read_profile
from ddpsim.trace.profile_import import import_profiles

hta = pytest.importorskip("hta.trace_analysis")
NS_FLAG = "HTA_DISABLE_NS_ROUNDING"  # hta/configs/env_options.py
KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def as_nccl(src, dst) -> None:
    """``src`` with each allreduce's GPU copies (gloo's) replaced by one NCCL kernel over their span."""
    data, profile = json.loads(gzip.decompress(src.read_bytes())), Profile(read_profile(src))
    copies, kernels = set(), []
    for launch, run in zip(profile.named("c10d::allreduce_"), profile.named("gloo:all_reduce")):
        ops = profile.launched_by(launch) + profile.launched_by(run)
        copies |= {(o.start, o.name) for o in ops}
        first = min(ops, key=lambda o: o.start)
        kernels.append({"ph": "X", "cat": "kernel", "name": KERNEL, "pid": first.pid, "tid": 999,
                        "ts": first.start, "dur": max(o.end for o in ops) - first.start,
                        "args": {"device": 0, "stream": 999, "correlation": first.args["correlation"]}})
    assert len(kernels) == 9  # 3 buckets in each of the 3 profiled steps
    data["traceEvents"] = [e for e in data["traceEvents"] if not (
        e.get("cat") == "gpu_memcpy" and (float(e["ts"]), e["name"]) in copies)] + kernels
    dst.write_text(json.dumps(data))


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nccl_like")
    for r in (0, 1):
        as_nccl(H100_DIR / f"resnet18_gloo_ws2_rank{r}.kineto.json.gz", folder / f"rank{r}.json")
    return folder


def hta_overlap(folder, include_last: bool) -> dict[int, float]:
    logging.getLogger("hta").setLevel(logging.ERROR)
    os.environ[NS_FLAG] = "1"  # HTA at the profile's own times, not rounded to whole microseconds
    try:
        analysis = hta.TraceAnalysis(trace_dir=str(folder), include_last_profiler_step=include_last)
        overlap = analysis.get_comm_comp_overlap(visualize=False)
    finally:
        os.environ.pop(NS_FLAG, None)
    return dict(zip(overlap["rank"], overlap["comp_comm_overlap_pctg"]))


def test_hta_on_the_profiles_is_ddpsims_import_with_the_last_step_kept(profiles):
    trace = import_profiles([profiles])
    theirs = hta_overlap(profiles, include_last=True)
    for rank in trace.ranks:
        ours = 100 * comm_weighted_overlap(rank)
        assert abs(theirs[rank.rank] - ours) < 0.01, (rank.rank, theirs[rank.rank], ours)


def test_htas_default_leaves_out_the_last_step(profiles):
    trace = import_profiles([profiles])
    theirs = hta_overlap(profiles, include_last=False)
    for rank in trace.ranks:
        numbers = [it.iteration for it in rank.iterations]
        ours = 100 * comm_weighted_overlap(rank, set(numbers[:-1]))
        assert abs(theirs[rank.rank] - ours) < 0.01, (rank.rank, theirs[rank.rank], ours)
        assert abs(100 * comm_weighted_overlap(rank) - ours) > 0.5  # and the last step moves the figure
