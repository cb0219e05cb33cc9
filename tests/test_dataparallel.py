"""DataParallel beside DDP (issue 38, item 4): the SIMULATED iterations, their measured pieces,
the figure, and the Learn page section that shows them."""
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from streamlit.testing.v1 import AppTest

from ddpsim import samples
from ddpsim.app import learn
from ddpsim.experiments.dp_pieces import _ready_shares, measure_pieces
from ddpsim.sim import network
from ddpsim.sim.dataparallel import LABEL, DPCosts, chunks, on_gpu, simulate_dataparallel
from ddpsim.sim.dp_compare import compare, ddp_workload, simulate_ddp

ROOT = Path(__file__).resolve().parents[1]
FORWARD = ("forward (Python, GIL)", "forward (kernels)")


def costs(**changes) -> DPCosts:
    """Small hand-made pieces: 4 parameters of 1 MB, 1 ms forward per 8 samples."""
    base = DPCosts(
        model="tiny", batch=32, forward_fixed_s=1e-4, forward_per_sample_s=1e-4, python_s=5e-4, module_calls=5,
        backward_fixed_s=2e-4, backward_per_sample_s=2e-4, loss_s=1e-5, optimizer_s=3e-4,
        replicate_python_s=5e-5, copy_Bps=10e9, copy_latency_s=1e-6, add_Bps=10e9, param_bytes=4_000_000,
        buffer_bytes=0, input_bytes_per_sample=4096, output_bytes_per_sample=40,
        params=[(f"p{i}", 1_000_000) for i in range(4)], ready_order=[3, 2, 1, 0], grad_share=[0.25] * 4,
        flops_per_sample=2e8)
    return replace(base, **changes)


@pytest.fixture(scope="module")
def measured() -> DPCosts:
    torch.set_num_threads(1)
    return measure_pieces("convnet", 8)


def duration(it, *names) -> float:
    return sum(p.end_s - p.start_s for p in it.phases if p.name in names)


def forward_span(it) -> float:
    spans = [p for p in it.phases if p.name in FORWARD]
    return max(p.end_s for p in spans) - min(p.start_s for p in spans)


def test_chunks_cut_the_batch_like_torch_chunk():
    for batch, n in [(32, 4), (10, 4), (16, 5), (7, 8), (3, 3)]:
        assert chunks(batch, n) == [len(c) for c in torch.arange(batch).chunk(n)]


def test_measured_pieces_are_real_and_consistent(measured):
    c = measured
    assert c.model == "convnet" and c.batch == 8 and "measured here" in c.source
    assert c.forward_s(8) > c.forward_s(1) > 0 and c.backward_s(8) > 0
    assert c.python_s == pytest.approx(c.forward_s(1)) and c.python_s < c.forward_s(8)  # one sample's forward
    assert c.module_calls > len(c.params) // 4  # every conv, BatchNorm, ... of the convnet is called
    assert sorted(c.ready_order) == list(range(len(c.params)))
    assert sum(c.grad_share) == pytest.approx(1.0) and min(c.grad_share) >= 0
    assert c.buffer_bytes > 0  # BatchNorm's running statistics, which replicate copies too
    assert c.param_bytes == sum(b for _, b in c.params)
    assert c.copy_Bps > 1e8 and c.add_Bps > 1e8 and c.copy_latency_s > 0
    assert c.flops_per_sample > 1e6  # the convnet's convolutions, counted by torch's FlopCounterMode


def test_pieces_are_measured_on_one_thread_whatever_the_caller_set():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        c = measure_pieces("mlp", 4)
        assert "1 thread(s)" in c.source and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_dataparallel_phases_are_ordered_and_never_overlap_on_a_device():
    it = simulate_dataparallel(costs(), 4)
    assert it.label == LABEL == "SIMULATED" and it.n_devices == 4
    for d in range(4):
        spans = it.on(d)
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(spans, spans[1:])), d
        assert all(p.end_s >= p.start_s for p in spans)
    firsts = {}
    for p in sorted(it.phases, key=lambda p: p.start_s):
        firsts.setdefault(p.name, p.start_s)
    steps = ["scatter", "replicate", "replicate (Python, GIL)", "forward (Python, GIL)", "gather", "loss",
             "scatter grad", "backward", "reduce (copy to device 0)", "optimizer"]
    assert [firsts[s] for s in steps] == sorted(firsts[s] for s in steps)
    assert it.iteration_s == max(p.end_s for p in it.phases)
    assert {p.device for p in it.phases if p.name in ("optimizer", "loss", "reduce (add)")} == {0}


def test_dataparallel_with_free_copies_and_no_python_is_one_replica_step():
    c = costs(python_s=0.0, replicate_python_s=0.0, copy_Bps=1e30, copy_latency_s=0.0, add_Bps=1e30)
    it = simulate_dataparallel(c, 4)
    assert it.iteration_s == pytest.approx(c.forward_s(8) + c.loss_s + c.backward_s(8) + c.optimizer_s)


def test_the_reduction_to_device_0_grows_with_the_devices():
    c = costs()
    reduce = [duration(simulate_dataparallel(c, n), "reduce (copy to device 0)", "reduce (add)") for n in (2, 4, 8)]
    assert reduce[0] < reduce[1] < reduce[2]
    assert reduce[2] == pytest.approx(7 * (c.copy_s(c.param_bytes) + c.param_bytes / c.add_Bps))
    copies = [duration(simulate_dataparallel(c, n), "replicate") for n in (2, 4, 8)]
    assert copies == pytest.approx([k * c.copy_s(c.param_bytes) for k in (1, 3, 7)])


def test_the_gil_bound_forward_never_beats_the_python_share():
    for n in (1, 2, 4, 8):
        c = costs()
        it = simulate_dataparallel(c, n)
        assert forward_span(it) >= n * c.python_s - 1e-12  # the threads' Python runs one at a time
        assert duration(it, "forward (Python, GIL)") == pytest.approx(n * c.python_s)
        all_python = costs(python_s=c.forward_s(32), forward_fixed_s=c.forward_s(32), forward_per_sample_s=0.0)
        assert forward_span(simulate_dataparallel(all_python, n)) == pytest.approx(n * c.forward_s(32))
        no_python = costs(python_s=0.0)
        assert forward_span(simulate_dataparallel(no_python, n)) == pytest.approx(c.forward_s(chunks(32, n)[0]))


def test_ddp_runs_on_the_same_pieces_and_overlaps_its_allreduces():
    c = costs()
    w = ddp_workload(c, 4)
    assert w.link.bandwidth_Bps == c.copy_Bps and w.forward_s == pytest.approx(c.forward_s(8))
    assert sum(w.grad_compute_s) == pytest.approx(c.backward_s(8))
    it = simulate_ddp(c, 4)
    assert it.n_devices == 4 and {p.device for p in it.phases} == {0, 1, 2, 3}
    for r in range(4):
        compute = [p for p in it.on(r) if p.name != "allreduce"]
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(compute, compute[1:]))
        backward = next(p for p in compute if p.name == "backward")
        assert any(p.start_s < backward.end_s for p in it.on(r) if p.name == "allreduce")  # overlapped


def test_the_gpu_case_takes_kernels_and_copies_from_the_profile():
    c = costs()
    g = on_gpu(c, "v100")
    p = network.gpus()["v100"]
    assert g.copy_Bps == pytest.approx(p["nvlink"]["bandwidth_gbps"] * 1e9 / 8)
    assert g.forward_per_sample_s == pytest.approx(c.flops_per_sample / (p["effective_tflops"] * 1e12))
    assert g.backward_per_sample_s == pytest.approx(2 * g.forward_per_sample_s)
    assert g.python_s == c.python_s and g.forward_s(1) > g.python_s  # the Python is kept, kernels added
    assert "V100" in g.device and "gpus.json" in g.source
    # Python-bound on a GPU: DataParallel's forward grows with the devices, DDP's does not
    assert forward_span(simulate_dataparallel(g, 8)) > 2 * forward_span(simulate_dataparallel(g, 2))
    rank0_forward = [next(p.end_s - p.start_s for p in simulate_ddp(g, n).on(0) if p.name == "forward")
                     for n in (2, 8)]
    assert rank0_forward[1] <= rank0_forward[0]
    with pytest.raises(ValueError, match="unknown GPU"):
        on_gpu(c, "abacus")
    with pytest.raises(ValueError, match="FLOPs"):
        on_gpu(replace(c, flops_per_sample=0.0), "v100")


@pytest.mark.parametrize("model", ["convnet", "mlp", "transformer"])
def test_ddp_beats_dataparallel_from_two_devices_on_the_measured_pieces(model):
    torch.set_num_threads(1)
    c = measure_pieces(model, None)
    for pieces in (c, on_gpu(c, "h100")):
        result = compare(pieces, 2, max_devices=8)
        assert result.label == "SIMULATED" and result.speedup == result.dp.iteration_s / result.ddp.iteration_s
        for n, dp, ddp in result.scaling:
            if n >= 2:
                assert ddp < dp, (model, pieces.device, n, dp, ddp)
        assert [n for n, *_ in result.scaling][:2] == [1, 2]


def test_the_figure_says_simulated(measured):
    from ddpsim.viz.dataparallel import merged, plot_dataparallel

    c = compare(measured, 4, max_devices=4)
    fig = plot_dataparallel(c)
    assert "SIMULATED" in fig._suptitle.get_text()
    assert len(fig.axes) == 2 and all(ax.has_data() for ax in fig.axes)
    assert "SIMULATED" in fig.axes[0].get_xlabel() and "SIMULATED" in fig.axes[1].get_title()
    names = [n for n, *_ in merged(c.dp.on(1))]
    assert names.count("backward") == 1 and "forward (Python, GIL)" in names


def test_the_learn_page_renders_the_dataparallel_section(monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(ROOT / "tests" / "fixtures"))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=180).run()
    at.switch_page("ddpsim/app/pages/learn.py").run()
    assert not at.exception and not at.error
    assert "Why DDP and not DataParallel" in [h.value for h in at.subheader]
    assert len(at.image) == len(learn.FIGURES) + 1  # the bundled samples' figures and this one
    at.slider(key="dp_devices").set_value(3).run()
    assert not at.exception and not at.error and len(at.image) == len(learn.FIGURES) + 1
    captions = [c.value for c in at.caption if c.value.startswith("SIMULATED: convnet")]
    assert len(captions) == 1 and "over 3 devices" in captions[0] and "measured here" in captions[0]
    at.selectbox(key="dp_kind").set_value("H100 (profile)").run()
    assert not at.exception and not at.error and len(at.image) == len(learn.FIGURES) + 1
    captions = [c.value for c in at.caption if c.value.startswith("SIMULATED: convnet")]
    assert len(captions) == 1 and "H100" in captions[0] and "over 3 devices" in captions[0]


def test_a_model_with_an_unused_parameter_is_refused():
    model = torch.nn.ModuleDict({"used": torch.nn.Linear(4, 2), "unused": torch.nn.Linear(4, 2)})
    training = SimpleNamespace(model=lambda x: model["used"](x), loss=lambda out, _t: out.sum())
    with pytest.raises(ValueError, match="no gradient"):
        _ready_shares(training, (torch.ones(3, 4),), None, list(model.parameters()))

