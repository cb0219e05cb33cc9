"""``ddpsim published``: published GPU DDP measurements and nccl-tests tables, the simulator's predictions
from one number per source (its 1-GPU baseline, or one bus bandwidth), and the errors it computes (never
typed in)."""
import json
import statistics

import pytest

from ddpsim.cli import main as cli
from ddpsim.experiments import gpu_rate, published, published_nccl, published_scaling
from ddpsim.sim.api import SimConfig, simulate
from ddpsim.sim.archs import synthetic


def test_reproductions_are_computed_and_cited(capsys, tmp_path):
    kept = tmp_path / "new" / "folder" / "pub.json"  # its folder is made, as record and simulate make theirs
    assert cli(["published", "--only", "ddp", "--json", str(kept)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert json.loads(kept.read_text())["ddp"]["rows"]
    assert summary["predictions"] == sum(len(s["targets"]) for s in published.SOURCES) >= 2
    assert "github.com/pytorch/pytorch" in "\n".join(out) and "DeepLearningExamples" in "\n".join(out)
    rows, _ = published.run()
    for r in rows:
        assert r["rel_error"] == pytest.approx((r["predicted"] - r["published"]) / r["published"])
        if r["role"].startswith("baseline"):  # the only number learnt from each source
            assert r["predicted"] == pytest.approx(r["published"], rel=1e-3)
    pt = {r["world_size"]: r["predicted"] for r in rows if r["source"].startswith("PyTorch DDP")}
    assert pt[16] > pt[8] >= pt[1]  # 2 machines over InfiniBand: more exposed communication than NVLink
    assert summary["max_abs_error"] == pytest.approx(
        max(abs(r["rel_error"]) for r in rows if r["role"] == "prediction"))


def test_an_empty_json_path_is_refused_before_the_work(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(["published", "--json", ""]) == 2  # it wrote nothing and said nothing
    out = capsys.readouterr()
    assert out.out == "" and out.err == "ddpsim published: error: --json wants a file name, not an empty one\n"
    assert list(tmp_path.iterdir()) == []


def test_a_baseline_no_rate_can_give_is_one_line_error():
    src = dict(published.SOURCES[0], baseline=(1, 1e-9, "impossible"))
    with pytest.raises(ValueError, match="no GPU rate gives"):
        published.fit_tflops(src)


def last_bucket(torch_version: str) -> tuple[int, list[int]]:
    """(bytes, parameters) of the bucket reduced last in a steady step of ResNet-50 on 16 V100s, as a
    source run on ``torch_version`` simulates it (``gpu_rate.simulate_src``'s layout)."""
    cfg = SimConfig(world_size=16, iters=3, **gpu_rate.torch_layout({"torch": torch_version}))
    trace, _ = simulate(synthetic("resnet50", "v100-ib100", batch=128), cfg)
    it = trace.ranks[0].iterations[-1]
    b = max(it.buckets, key=lambda b: b.ready_ns)
    return b.bytes, trace.ranks[0].layout_at(it.iteration).buckets[b.bucket].params


def test_a_source_before_torch_1_6_keeps_its_constructor_buckets():
    """Note [The buckets of the torch a source ran]: torch 1.4's DDP never rebuilt its buckets, so the one
    reduced last, after the backward, holds the parameters defined first (1 MiB and the one that passes it);
    from torch 1.6 the rebuild gives 1 MiB to the gradients ready first and leaves the rest last."""
    never = {"order": "reverse"}  # the constructor's layout, never rebuilt
    assert gpu_rate.torch_layout({"torch": "1.4.0"}) == gpu_rate.torch_layout({"torch": "1.4.0a0"}) == never
    assert gpu_rate.torch_layout({"torch": "1.6.0"}) == gpu_rate.torch_layout({"torch": "2.13.0"}) == {}
    assert gpu_rate.torch_layout({}) == {}  # not known: the pinned torch's
    assert gpu_rate.citation(published.SOURCES[0]).endswith(  # the output says which buckets it simulated
        "[torch 1.4.0a0 (simulated with DDP's constructor buckets, never rebuilt)]")
    assert gpu_rate.citation(published.SOURCES[1]).endswith("[torch 1.9.0a0]")
    (old, first), (new, _) = last_bucket("1.4.0"), last_bucket("1.7.1")
    assert 1 << 20 <= old < 2 << 20 and 0 in first and new > 8 * (1 << 20)  # 1.6 MB and 9.7 MB


def test_nccl_tests_tables_are_predicted_from_one_point_per_system(capsys):
    assert cli(["published", "--only", "nccl"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    rows = published_nccl.run()
    fits = [r for r in rows if r["role"] == "fit"]
    assert len(fits) == len(published_nccl.SOURCES) >= 2
    for r in fits:  # the one number learnt per source: a NIC's bandwidth that gives this point
        assert r["predicted"] == pytest.approx(r["published"], rel=1e-6)
    preds = [r for r in rows if r["role"] == "prediction"]
    assert {r["gpus"] for r in preds} >= {8, 1024} and len({r["bytes"] for r in preds}) >= 6
    assert summary["nccl"]["predictions"] == len(preds)
    assert summary["nccl"]["median_abs_error"] == pytest.approx(statistics.median(abs(r["rel_error"]) for r in preds))
    assert summary["nccl"]["median_abs_error"] <= 0.10  # issue 44: the median over every size and GPU count
    assert all("github.com" in r["where"] for r in rows)
    # the big ring on 4-60 B200 nodes: the node's 8 NICs, not NVLink, set the bus bandwidth
    ring = [r for r in preds if r["source"].startswith("Together 'flapping") and r["algo"] == "ring" and r["gpus"] > 8]
    assert statistics.median(abs(r["rel_error"]) for r in ring) < 0.05


@pytest.mark.slow
def test_multi_node_ddp_scaling_tables():
    rows = published_scaling.run()
    for src in published_scaling.SOURCES:
        mine = [r for r in rows if r["source"] == src["name"]]
        assert len({-(-r["gpus"] // 8) for r in mine}) >= 3  # three or more node counts
        assert mine[0]["predicted"] == pytest.approx(mine[0]["published"], rel=1e-3)  # the one fitted point
        assert all(b["straggler"] >= a["straggler"] for a, b in zip(mine, mine[1:]))  # more ranks, more waiting
    bert = [r for r in rows if r["source"].startswith("NVIDIA DLE BERT") and r["role"] == "prediction"]
    assert len(bert) == 12 and max(abs(r["rel_error"]) for r in bert) <= 0.05
    ray = [r for r in rows if r["source"].startswith("RaySGD ResNet-50 b128 FP32") and r["role"] == "prediction"]
    assert len(ray) == 4 and max(abs(r["rel_error"]) for r in ray) <= 0.05  # data on the GPU, 1 to 8 p3dn nodes
