"""The simulator's model of what a comm hook sends (ddpsim/sim/comm_hooks.py), against torch's
own hooks run on a real one-rank gloo DDP (torch is the oracle for PowerSGD's P and Q sizes)."""
from pathlib import Path

import pytest
import torch

from ddpsim.sim.comm_hooks import CommHook, powersgd_sizes, stages


def test_names_are_parsed_and_bad_ones_refused_in_one_line():
    assert CommHook.parse("round-robin:3").groups == 3 and CommHook.parse(None).name == "allreduce"
    for bad in ("fp8", "round-robin", "round-robin:x", "fp16:2"):
        with pytest.raises(ValueError) as err:
            CommHook.parse(bad)
        assert "\n" not in str(err.value)


def test_compression_halves_and_noop_sends_nothing():
    shapes = [(64, 32), (64,)]
    fp32 = (64 * 32 + 64) * 4
    assert stages(CommHook("allreduce"), shapes, 4, 0) == [[fp32]]
    assert stages(CommHook("fp16"), shapes, 4, 0) == stages(CommHook("bf16"), shapes, 4, 0) == [[fp32 // 2]]
    assert stages(CommHook("noop"), shapes, 4, 0) == []
    warm = CommHook("powersgd", powersgd_start_iter=2)
    assert stages(warm, shapes, 4, 1) == [[fp32]]  # before start_powerSGD_iter: the plain allreduce


class _Net(torch.nn.Module):
    """A conv (4-D weight), two linears (2-D) and their biases (1-D): every PowerSGD case."""

    def __init__(self):
        super().__init__()
        self.conv, self.lin, self.out = torch.nn.Conv2d(1, 4, 3), torch.nn.Linear(72, 32), torch.nn.Linear(32, 3)

    def forward(self, x):
        return self.out(self.lin(self.conv(x.view(-1, 1, 5, 8)).relu().flatten(1)).relu())


def _torch_powersgd_sizes(rank, world, r):
    """torch's powerSGD_hook on a one-rank DDP: the parameter shapes and the P and Q elements it
    allocated for its one bucket."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

    torch.manual_seed(0)
    model = _Net()
    shapes = [tuple(p.shape) for p in model.parameters()]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = psgd.PowerSGDState(None, matrix_approximation_rank=r, start_powerSGD_iter=2, random_seed=0)
    ddp.register_comm_hook(state, psgd.powerSGD_hook)
    for _ in range(4):
        ddp(torch.randn(5, 40)).sum().backward()
    assert len(state.p_memory_dict) == 1  # one bucket
    return shapes, state.p_memory_dict[0].numel(), state.q_memory_dict[0].numel()


@pytest.mark.parametrize("r", [1, 4])
def test_powersgd_p_and_q_sizes_equal_torchs(r):
    from distutil import run_ranks

    shapes, p, q = run_ranks(_torch_powersgd_sizes, 1, args=(r,), timeout=120)[0]
    plain, ps, qs = powersgd_sizes(shapes, r, 2.0)
    assert (ps, qs) == (p, q) and plain > 0  # the biases (1-D) go uncompressed


def _sim(hook, **cfg):
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    return simulate(synthetic("resnet50", "v100-eth25"), SimConfig(world_size=64, iters=4, comm_hook=hook, **cfg))[1]


def test_a_hook_changes_what_is_sent_and_the_exposed_communication_follows():
    plain, same = _sim(None), _sim("allreduce")
    assert same["iteration_time_s"] == plain["iteration_time_s"]  # allreduce_hook is DDP's own allreduce
    fp16, noop = _sim("fp16"), _sim("noop")
    assert noop["exposed_comm_s"] == 0 < fp16["exposed_comm_s"] < plain["exposed_comm_s"]
    assert noop["iteration_time_s"] < fp16["iteration_time_s"] < plain["iteration_time_s"]
    # nothing sent, nothing to overlap: an overlap of 0 there would read as "all of it exposed"
    assert not noop["communicates"] and noop["overlap_fraction"] == 0 and fp16["communicates"]
    warm = _sim("powersgd", powersgd_start_iter=100)  # every simulated step is before PowerSGD starts
    assert warm["iteration_time_s"] == plain["iteration_time_s"]
    assert _sim("powersgd", powersgd_start_iter=1, powersgd_rank=4)["exposed_comm_s"] < plain["exposed_comm_s"]


def test_noop_buckets_are_done_as_they_are_launched_in_every_step():
    """hooked.launch_bucket: noop's bucket completes at its recorded launch, to the nanosecond. It ended at
    the simulator's clock, which differs from the launch time worked out as a prefix sum (Note [Gradient
    times as prefix sums] in sim/model.py) by a rounding: buckets 1 ns long or ending 1 ns before they began,
    and a BERT-large replay at 64 ranks read an overlap of 1.0 over 6 steps and -0.67 over 20."""
    from dataclasses import replace

    from ddpsim import load_trace, samples
    from ddpsim.learn.extract import replay_config, workload_from_trace
    from ddpsim.sim import simulate

    trace = load_trace(samples.sample_path("25_sim_bert-large_a100-eth100_w64_cap100.json"))
    w = workload_from_trace(trace)
    cfg = replace(replay_config(w, trace, noise="drawn", world_size=64, comm_hook="noop"), iters=20)
    simulated, summary = simulate(w, cfg)
    spans = [(b.launch_ns, b.complete_ns) for r in simulated.ranks for it in r.iterations for b in it.buckets]
    assert spans and all(end == start for start, end in spans)
    assert not summary["communicates"] and summary["overlap_fraction"] == 0.0 and summary["exposed_comm_s"] == 0.0


def test_simulate_takes_a_comm_hook_and_refuses_a_bad_one_in_one_line(capsys):
    from ddpsim.cli import main as cli

    assert cli(["simulate", "--arch", "resnet50", "--world-size", "8", "--comm-hook", "fp16", "--iters", "3"]) == 0
    assert cli(["simulate", "--arch", "resnet50", "--comm-hook", "fp8"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert "comm hook must be one of" in err[-1]
    # torch's start_powerSGD_iter (1000) is past every simulated step: said, not silently the no-hook numbers
    assert cli(["simulate", "--arch", "resnet50", "--world-size", "8", "--comm-hook", "powersgd", "--iters", "3"]) == 0
    assert "PowerSGD starts at synced step 1000" in capsys.readouterr().err
    assert cli(["simulate", "--arch", "resnet50", "--world-size", "8", "--comm-hook", "powersgd", "--iters", "4",
                "--powersgd-start-iter", "2"]) == 0
    assert "PowerSGD starts" not in capsys.readouterr().err
    # torch's PowerSGDState refuses start_powerSGD_iter 1 (error feedback): so do simulate and record
    assert cli(["simulate", "--arch", "resnet50", "--world-size", "8", "--comm-hook", "powersgd", "--iters", "4",
                "--powersgd-start-iter", "1"]) != 0
    assert "--powersgd-start-iter must be at least 2, not 1" in capsys.readouterr().err.strip().splitlines()[-1]
    # PowerSGD's options without PowerSGD are refused, as record refuses them (not silently ignored)
    assert cli(["simulate", "--arch", "resnet50", "--world-size", "8", "--powersgd-rank", "4", "--iters", "3"]) != 0
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "--powersgd-rank and --powersgd-start-iter need --comm-hook powersgd (this simulation's hook is none)")


def test_the_whatif_page_offers_the_hooks_and_fp16_shortens_a_gpu_models_iteration(monkeypatch):
    AppTest = pytest.importorskip("streamlit.testing.v1").AppTest  # the app (a GPU box may lack it)

    from ddpsim import samples

    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120).run()
    at.selectbox(key="ddpsim_source").set_value("20_sim_resnet50_v100-eth25_w64_default").run()
    at.switch_page("ddpsim/app/pages/whatif.py").run()
    hook = next(s for s in at.selectbox if s.label == "Communication hook")
    assert set(hook.options) >= {"none (DDP's own allreduce)", "fp16", "noop", "round-robin:2",
                                 "powersgd (rank 1, from step 2; torch's default start is 1000)"}
    hook.set_value("fp16").run()
    assert not at.exception and not at.error
    text = "\n".join(m.value for m in at.markdown)
    change = float(text.split("Iteration time ")[1].split("%")[0])
    assert change < 0, text  # half the bytes on 25 GbE: less exposed communication
    overlap = "Comm. overlapped with compute"
    assert next(m.value for m in at.metric if m.label == overlap).endswith("%")
    hook.set_value("noop").run()  # no collective: the metric says there is none, not 0%
    assert next(m.value for m in at.metric if m.label == overlap) == "none" and not at.exception


def test_the_hooks_compute_at_measured_rates_is_paid_where_torch_pays_it():
    from ddpsim.sim.comm_hooks import compute_s

    shapes, rates = [(256, 128), (256,)], {"cast_s_per_byte": 1e-9, "matmul_s_per_flop": 1e-10}
    nbytes = (256 * 128 + 256) * 4
    assert compute_s(CommHook("fp16"), shapes, 4, 0, rates) == (nbytes * 1e-9, [], nbytes * 1e-9)
    assert compute_s(CommHook("noop"), shapes, 4, 0, rates) == (0.0, [], 0.0)
    before, between, after = compute_s(CommHook("powersgd", powersgd_start_iter=0), shapes, 4, 0, rates)
    assert len(between) == 2 and min(before, after, *between) > 0  # three stages, compute around each
    free, priced = _sim("fp16"), _sim("fp16", hook_rates=rates)
    assert priced["iteration_time_s"] > free["iteration_time_s"]
    with pytest.raises(ValueError, match="hook_rates"):
        _sim("fp16", hook_rates={"cast": 1.0})


def test_the_break_even_bandwidth_is_where_a_hook_stops_beating_the_allreduce():
    from ddpsim.experiments.compression import break_even_gbps, iteration_vs_bandwidth
    from ddpsim.viz import plot_compression

    rows = [{"hook": h, "bandwidth_gbps": b, "iteration_time_s": t} for h, b, t in [
        ("allreduce", 10, 4.0), ("allreduce", 100, 2.0), ("allreduce", 1000, 1.0),
        ("x", 10, 2.0), ("x", 100, 2.0), ("x", 1000, 1.5)]]
    assert break_even_gbps(rows, "x") == pytest.approx(100.0)  # gain 2 at 10, none left at 100
    rows[4]["iteration_time_s"] = 1.0  # gain 1 at 100, -0.5 at 1000: two thirds of the way in log scale
    assert break_even_gbps(rows, "x") == pytest.approx(10 ** (2 + 2 / 3))
    real = iteration_vs_bandwidth("resnet50", "v100-eth25", world_size=16, bandwidths=(1, 10, 100))
    plain = [r["iteration_time_s"] for r in real if r["hook"] == "allreduce"]
    assert plain == sorted(plain, reverse=True)  # more bandwidth, shorter iterations
    fig = plot_compression(real, {"powersgd": break_even_gbps(real, "powersgd")}, "ResNet-50")
    assert {line.get_gid() for line in fig.axes[0].lines} >= {"compression:allreduce", "compression:fp16"}


@pytest.mark.slow  # a real recording with a hook
def test_the_whatif_page_starts_from_the_recorded_hook_and_none_drops_it(record, monkeypatch):
    """On a run recorded with fp16 the selector said "none (DDP's own allreduce)" while the simulation
    replayed fp16, and no choice dropped the hook: now it opens on fp16 (nothing changed: 0%) and none is
    DDP's own allreduce."""
    AppTest = pytest.importorskip("streamlit.testing.v1").AppTest  # the app (a GPU box may lack it)

    from ddpsim import samples

    monkeypatch.delenv(samples.ENV_VAR, raising=False)
    trace = record(model="mlp", world_size=2, iters=4, comm_hook="fp16")
    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120)
    at.session_state["ddpsim_uploads"] = {"upload: fp16.json": trace}
    at.session_state["ddpsim_trace_ids"] = {"upload: fp16.json": 0}
    at.session_state["ddpsim_source"] = "upload: fp16.json"
    at.run().switch_page("ddpsim/app/pages/whatif.py").run()
    hook = next(s for s in at.selectbox if s.label == "Communication hook")
    assert hook.value == "fp16" and not at.exception and not at.error
    assert "the same as the configuration unchanged" in "\n".join(m.value for m in at.markdown)
    assert _kept_run(at) == ("fp16", {"float16"})  # the recorded hook replayed
    hook = next(s for s in at.selectbox if s.label == "Communication hook")
    hook.set_value("none").run()  # "none (DDP's own allreduce)": a string, as a None option shows as no choice
    assert not at.exception and not at.error
    assert next(s for s in at.selectbox if s.label == "Communication hook").value == "none"
    hook_sent, dtypes = _kept_run(at)
    assert hook_sent == "allreduce" and "float16" not in dtypes  # fp16 and fp32 can cost alike on gloo: what is sent tells


def _kept_run(at):
    """Keep the What-if run and say which hook it simulated and the dtypes its hook collectives sent."""
    next(b for b in at.button if b.label.startswith("Keep this simulated run")).click().run()
    kept = at.session_state["ddpsim_uploads"][at.session_state["ddpsim_last_kept"]]
    sent = {c.dtype for r in kept.ranks for it in r.iterations for b in it.buckets for c in b.collectives or []}
    return kept.meta["options"].get("comm_hook"), sent


def test_the_steady_state_of_a_powersgd_run_is_after_its_warm_up():
    """The What-if page simulates 3 synced steps with PowerSGD from step 2: its headline for BERT-large
    on 64 H100s over 10 GbE was 1275.4 ms, the mean of step 1 (a plain allreduce, 2403.4 ms) and step 2
    (PowerSGD, 147.3 ms), while its figure showed step 1. The steps before start_powerSGD_iter are
    PowerSGD's warm-up, not its steady state."""
    from ddpsim.analysis import cycle_metrics, steady_cycles
    from ddpsim.sim import SimConfig, simulate, synthetic

    w = synthetic("bert-large", "h100-eth10")
    trace, summary = simulate(w, SimConfig(world_size=64, iters=3, comm_hook="powersgd", powersgd_start_iter=2))
    assert steady_cycles(trace) == [[2]]
    assert summary["iteration_time_s"] == pytest.approx(cycle_metrics(trace, [2])["iteration_time_s"])
    assert cycle_metrics(trace, [1])["iteration_time_s"] > 5 * summary["iteration_time_s"]
    late = simulate(w, SimConfig(world_size=64, iters=3, comm_hook="powersgd", powersgd_start_iter=1000))[0]
    assert steady_cycles(late) == [[1], [2]]  # no step compressed: the warm-up is all there is
