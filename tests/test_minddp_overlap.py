"""minddp overlaps communication with backward, as recorded by a RankRecorder."""
from __future__ import annotations

import json

import pytest
import torch

from distutil import run_ranks

ITERATIONS = 4


def record_rank(rank, world_size, shard_dir, impl):
    from ddpsim.minddp import DistributedDataParallel as MinDDP, NaiveDDP, OverlapDDP
    from ddpsim.models.mlp import mlp
    from ddpsim.events import RankRecorder, now_ns

    torch.manual_seed(0)
    w = mlp()  # 10 params, ~12.6 MB: 0.25 MiB caps give 4 buckets after the rebuild
    rec = RankRecorder(f"{shard_dir}/{impl}-rank{rank}.jsonl", rank, {"impl": impl})
    cls = {"minddp": MinDDP, "naive": NaiveDDP, "overlap": OverlapDDP}[impl]
    ddp = cls(w.model, bucket_cap_mb=0.25, recorder=rec)
    opt = torch.optim.SGD(w.model.parameters(), lr=0.01)
    for it in range(ITERATIONS):
        rec.begin_iteration(it, sync=True)
        x, y = w.batch(it, rank, world_size, 32)
        opt.zero_grad()
        start = now_ns()
        w.loss(ddp(x), y).backward()
        rec.span("backward", start, now_ns())
        opt.step()
        rec.end_iteration()
    rec.finish(None)
    return rec.path.as_posix()


def _read(path):
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    layouts = [x for x in lines if x["kind"] == "layout"]
    iterations = {x["iteration"]: x for x in lines if x["kind"] == "iteration"}
    return layouts, iterations


@pytest.mark.slow  # real gloo ranks
def test_buckets_launch_before_backward_ends(tmp_path):
    paths = run_ranks(record_rank, 2, args=(str(tmp_path), "minddp"), timeout=120)
    for path in paths:
        layouts, iterations = _read(path)
        assert [(l["from_iteration"], l["layout_kind"], len(l["buckets"])) for l in layouts] \
            == [(0, "construction", 1), (1, "rebuilt", 4)]
        assert iterations[0]["buckets"][0]["launch_ns"] >= max(
            g["t_ns"] for g in iterations[0]["grad_ready"])  # iteration 0: no overlap
        for it in range(1, ITERATIONS):
            rec = iterations[it]
            last_ready = max(g["t_ns"] for g in rec["grad_ready"])
            launches = [b["launch_ns"] for b in rec["buckets"]]
            assert [b["bucket"] for b in rec["buckets"]] == [0, 1, 2, 3]
            assert launches == sorted(launches)
            assert launches[0] < last_ready, "bucket 0 should launch while backward runs"
            assert all(b["complete_ns"] >= b["launch_ns"] for b in rec["buckets"])
            assert all(b["ready_ns"] <= b["launch_ns"] for b in rec["buckets"])


@pytest.mark.slow  # real gloo ranks
def test_naive_reduces_each_param_after_backward(tmp_path):
    paths = run_ranks(record_rank, 2, args=(str(tmp_path), "naive"), timeout=120)
    for path in paths:
        layouts, iterations = _read(path)
        assert len(layouts) == 1 and len(layouts[0]["buckets"]) == 10
        for rec in iterations.values():
            last_ready = max(g["t_ns"] for g in rec["grad_ready"])
            assert len(rec["buckets"]) == 10
            assert all(b["launch_ns"] >= last_ready for b in rec["buckets"])


@pytest.mark.slow  # real gloo ranks
def test_overlap_launches_each_param_from_its_hook(tmp_path):
    paths = run_ranks(record_rank, 2, args=(str(tmp_path), "overlap"), timeout=120)
    for path in paths:
        layouts, iterations = _read(path)
        assert len(layouts) == 1 and len(layouts[0]["buckets"]) == 10
        for rec in iterations.values():
            ready = {g["param"]: g["t_ns"] for g in rec["grad_ready"]}
            assert len(rec["buckets"]) == 10
            params = {b["index"]: b["params"][0] for b in layouts[0]["buckets"]}
            for b in rec["buckets"]:  # launched by the gradient's own hook, right after it
                assert b["launch_ns"] >= ready[params[b["bucket"]]]
            launches = sorted(b["launch_ns"] for b in rec["buckets"])
            assert launches[0] < max(ready.values()), "the first allreduce overlaps backward"
            assert all(b["complete_ns"] >= b["launch_ns"] for b in rec["buckets"])


def train_both(rank, world_size):
    """3 SGD steps of the mlp with OverlapDDP and with torch's DDP: the same weights."""
    from torch import nn

    from ddpsim.minddp import OverlapDDP
    from ddpsim.models.mlp import mlp

    out = []
    for cls in (OverlapDDP, nn.parallel.DistributedDataParallel):
        torch.manual_seed(rank)  # different per rank: construction must broadcast
        w = mlp()
        ddp = cls(w.model)
        opt = torch.optim.SGD(w.model.parameters(), lr=0.1)
        for it in range(3):
            x, y = w.batch(it, rank, world_size, 16)
            opt.zero_grad()
            w.loss(ddp(x), y).backward()
            opt.step()
        out.append([p.detach().clone() for p in w.model.parameters()])
    ours, theirs = out  # compared here: tensors do not travel back through the queue
    return max(float((a - b).abs().max() / (b.abs().max() + 1e-12)) for a, b in zip(ours, theirs))


@pytest.mark.slow  # real gloo ranks
def test_overlap_trains_like_torch_ddp():
    assert max(run_ranks(train_both, 2, timeout=120)) < 1e-5
