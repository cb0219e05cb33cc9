"""DDP's buffer broadcast (``broadcast_buffers``): recorded, mirrored by minddp, read, simulated.

Note [Buffers follow rank 0] in ddpsim/minddp/ddp.py; Note [A broadcast learnt from the
recording] in ddpsim/learn/extract.py.
"""
import dataclasses

import pytest
import torch

from ddpsim.sim import Link, ParamSpec, SimConfig, Workload, simulate
from ddpsim.trace import TraceFormatError, load_trace
from distutil import run_ranks

MIB = 1024 * 1024


def _buffer_bytes(model_name: str) -> int:
    from ddpsim.models import build_workload
    return sum(b.numel() * b.element_size() for b in build_workload(model_name).model.buffers())


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["torch", "minddp"])
def test_every_rank_and_iteration_records_the_broadcast_of_the_models_buffers(record, impl):
    trace = record(model="convnet", world_size=2, iters=3, impl=impl)
    nbytes = _buffer_bytes("convnet")
    assert nbytes > 0 and trace.meta["buffer_bytes"] == nbytes
    for rank in trace.ranks:
        assert len(rank.iterations) == 3
        for it in rank.iterations:
            c = it.buffer_broadcast
            assert c is not None and c.bytes == nbytes
            assert it.forward.start_ns <= c.launch_ns <= c.complete_ns <= it.forward.end_ns


@pytest.mark.slow
def test_no_broadcast_buffers_records_none_and_says_so(record):
    trace = record(model="convnet", world_size=2, iters=2, broadcast_buffers=False)
    assert trace.meta["options"]["broadcast_buffers"] is False
    assert all(it.buffer_broadcast is None for r in trace.ranks for it in r.iterations)
    assert trace.meta["buffer_bytes"] == _buffer_bytes("convnet")  # known, for a what-if that turns it on


def _train_both(rank, world, broadcast):
    """10 steps of torch's DDP and of minddp on convnet (BatchNorm), rank-dependent data and
    rank-dependent initial weights and buffers; returns (max |difference|, buffers differ across ranks)."""
    import torch.distributed as dist

    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload, call_batch

    torch.set_num_threads(1)
    out = {}
    for impl in ("torch", "minddp"):
        torch.manual_seed(100 + rank)
        w = build_workload("convnet")
        for b in w.model.buffers():
            if b.is_floating_point():
                b.add_(0.1 * rank)  # ranks start from different statistics
        ddp = (torchcompat.torch_ddp(w.model, broadcast) if impl == "torch"
               else MinDDP(w.model, broadcast_buffers=broadcast))
        opt = torch.optim.SGD(w.model.parameters(), lr=0.05)
        for step in range(10):
            inputs, target = call_batch(w, step, rank, world, 8)
            opt.zero_grad()
            w.loss(ddp(*inputs), target).backward()
            opt.step()
        out[impl] = [t.detach().clone().double() for t in (*w.model.parameters(), *w.model.buffers())]
    diff = max((a - b).abs().max().item() for a, b in zip(out["torch"], out["minddp"]))
    mine = torch.cat([t.flatten() for t in out["minddp"]])
    theirs = mine.clone()
    dist.broadcast(theirs, 0)
    return diff, bool((mine != theirs).any())


@pytest.mark.slow
@pytest.mark.parametrize("broadcast", [True, False])
def test_minddp_equals_torch_with_broadcast_buffers_on_and_off(broadcast):
    results = run_ranks(_train_both, 2, args=(broadcast,), timeout=300)
    assert all(diff <= 1e-6 for diff, _ in results), results
    assert results[1][1]  # rank 1 differs from rank 0 (its own batches), with or without broadcasts


def test_a_broadcast_that_ends_before_it_starts_is_refused(tmp_path):
    import json

    from ddpsim.samples import BUNDLED_DIR
    raw = json.loads(next(BUNDLED_DIR.glob("02_*.json")).read_text())
    it = raw["ranks"][0]["iterations"][1]
    it["buffer_broadcast"] = {"launch_ns": it["forward"]["start_ns"] + 10, "complete_ns": it["forward"]["start_ns"],
                              "bytes": 8}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(TraceFormatError) as err:
        load_trace(path)
    assert "buffer_broadcast" in str(err.value) and "\n" not in str(err.value)


def _tiny(buffer_bytes=4096, learnt=None):
    """2 params of 1 MiB; forward 1 s; each gradient 1 s; 1 MiB/s ring at alpha 0.1 s."""
    return Workload(name="tiny", params=[ParamSpec(i, f"p{i}", MIB) for i in range(2)], ready_order=[1, 0],
                    grad_compute_s=[1.0, 1.0], link=Link(alpha_s=0.1, bandwidth_Bps=MIB), forward_s=1.0,
                    optimizer_s=0.5, buffer_bytes=buffer_bytes, buffer_broadcast_s=learnt,
                    meta={"recorded_world_size": 2})


def test_the_broadcast_opens_each_forward_after_a_synced_one_and_costs_half_an_allreduce():
    w = _tiny()
    trace, _ = simulate(w, SimConfig(world_size=4, iters=3, no_sync_every=2, bucket_cap_mb=100))
    its = trace.ranks[0].iterations
    assert [it.buffer_broadcast is not None for it in its] == [True, False] * 3  # after a synced forward only
    c = its[0].buffer_broadcast
    assert c.bytes == 4096 and c.launch_ns == its[0].forward.start_ns
    expected = 0.5 * (2 * 3 * 0.1 + 2 * 3 / 4 * 4096 / MIB)  # half the ring allreduce at k=4
    assert (c.complete_ns - c.launch_ns) * 1e-9 == pytest.approx(expected, abs=1e-9)
    assert its[0].forward_compute_ns * 1e-9 == pytest.approx(1.0)


def test_turning_broadcast_buffers_off_removes_it():
    w = _tiny()
    on, s_on = simulate(w, SimConfig(world_size=4, iters=3))
    off, s_off = simulate(w, SimConfig(world_size=4, iters=3, broadcast_buffers=False))
    assert all(it.buffer_broadcast is None for r in off.ranks for it in r.iterations)
    assert s_on["iteration_time_s"] - s_off["iteration_time_s"] == pytest.approx(0.5 * (2 * 3 * 0.1 + 1.5 * 4096 / MIB))
    assert off.meta["options"]["broadcast_buffers"] is False


def test_a_learnt_broadcast_is_scaled_to_other_world_sizes_by_the_link():
    w = _tiny(learnt=0.05)  # measured 50 ms at 2 ranks, where the model says 0.1 s + 4 KiB / 1 MiB/s
    at = {}
    for k in (2, 8):
        trace, _ = simulate(w, SimConfig(world_size=k, iters=2))
        c = trace.ranks[0].iterations[1].buffer_broadcast
        at[k] = (c.complete_ns - c.launch_ns) * 1e-9
    link = w.link
    assert at[2] == pytest.approx(0.05)
    assert at[8] == pytest.approx(0.05 * link.broadcast_s(4096, 8) / link.broadcast_s(4096, 2))
    assert at[8] > at[2]
    assert dataclasses.replace(w, buffer_bytes=0).broadcast_cost(link, 8) is None


@pytest.mark.slow
def test_the_whatif_page_turns_the_broadcast_off_on_a_run_with_buffers():
    """The real app, on the bundled convnet recording (BatchNorm buffers, broadcasts recorded)."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    app = str(Path(__file__).resolve().parents[1] / "app.py")
    at = AppTest.from_file(app, default_timeout=120).run()
    at.selectbox(key="ddpsim_source").set_value("05_convnet_torch_no_sync3").run()
    at.switch_page("ddpsim/app/pages/whatif.py").run()
    assert not at.exception and not at.error
    toggle = next(t for t in at.toggle if t.label == "forward_sync_buffers")
    assert toggle.value is True  # as recorded
    before = {m.label: m.value for m in at.metric}
    toggle.set_value(False).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    after = {m.label: m.value for m in at.metric}
    assert before.keys() == after.keys() and before != after


def test_a_run_without_buffers_has_no_broadcast_toggle():
    from ddpsim.learn.buffers import has_buffers
    from ddpsim.samples import BUNDLED_DIR

    assert not has_buffers(load_trace(BUNDLED_DIR / "01_mlp_torch_default.json"))
    assert has_buffers(load_trace(BUNDLED_DIR / "05_convnet_torch_no_sync3.json"))


def test_a_gpu_models_batchnorm_buffers_are_torchvisions_and_broadcast_before_each_forward():
    """--arch resnet50 had no buffers, so --broadcast-buffers changed nothing; its 53 BatchNorm layers' running
    statistics are the real model's buffers (ddpsim.models' torchvision ResNet-50), broadcast on NCCL's ring."""
    from ddpsim.sim import synthetic
    from ddpsim.sim.archs import arch_defaults
    from ddpsim.sim.network import network_for

    w = synthetic("resnet50", "a100-ib200")
    assert w.buffer_bytes == _buffer_bytes("ddpsim.models.resnet:resnet50") == 212_904
    assert synthetic("bert-large", "a100-ib200").buffer_bytes == synthetic("gpt2", "a100-ib200").buffer_bytes == 0
    t = {on: simulate(w, SimConfig(world_size=64, broadcast_buffers=on, **arch_defaults(w)))[1]["iteration_time_s"]
         for on in (True, False)}
    assert t[True] - t[False] == pytest.approx(network_for("a100-ib200", 64).broadcast_s(212_904, 64), rel=1e-3)
