"""What a comm hook costs: measured in a recording's own ranks (record/hookprobe.py, meta.hook_rates),
carried into a replay's what-if (learn.replay_config), priced by the simulator (sim/comm_hooks.py,
sim/hooked.py), and taken from the GPU profile for a GPU model."""
import dataclasses
import json
import math
from pathlib import Path

import pytest

from ddpsim.sim.comm_hooks import RATES, CommHook, gpu_rates, priced_bytes


def _sim(hook, **cfg):
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    return simulate(synthetic("resnet50", "v100-eth25"), SimConfig(world_size=64, iters=4, comm_hook=hook, **cfg))[1]


def test_a_2_byte_allreduce_is_priced_at_its_measured_cost_per_element():
    half = 1000  # bytes of an fp16 bucket of 500 elements, 2000 bytes in fp32
    assert priced_bytes(CommHook("fp16"), half, {}) == 1000  # default: half the fp32 bytes (NCCL)
    assert priced_bytes(CommHook("fp16"), half, {"float16_allreduce_cost": 1.25}) == 2500
    assert priced_bytes(CommHook("bf16"), half, {"float16_allreduce_cost": 9, "bfloat16_allreduce_cost": 0.75}) == 1500
    assert priced_bytes(CommHook("powersgd"), half, {"float16_allreduce_cost": 9}) == half  # fp32 P and Q


def test_the_simulator_pays_the_measured_dtype_cost_and_latency():
    cheap, dear = _sim("fp16"), _sim("fp16", hook_rates={"float16_allreduce_cost": 1.0})
    assert dear["iteration_time_s"] > cheap["iteration_time_s"]  # fp16 as dear as fp32: no gain on 25 GbE
    plain = _sim(None)
    assert dear["iteration_time_s"] == pytest.approx(plain["iteration_time_s"], rel=0.02)
    slow = _sim("powersgd", powersgd_start_iter=0, hook_rates={"allreduce_latency_s": 0.05})
    fast = _sim("powersgd", powersgd_start_iter=0)
    assert slow["iteration_time_s"] > fast["iteration_time_s"] + 0.05  # three stages, each >= 50 ms
    with pytest.raises(ValueError, match="hook_rates"):
        _sim("fp16", hook_rates={"allreduce_latency_s": -1.0})


def test_a_gpu_model_prices_a_hooks_compute_at_the_profiles_rates():
    from ddpsim.app.whatif import Base, sim_config
    from ddpsim.sim.archs import arch_defaults
    from ddpsim.sim.archs import synthetic

    rates = gpu_rates("v100")
    assert rates["cast_s_per_byte"] > 0 and gpu_rates("no-such-gpu") == {}
    cfg = sim_config(Base("synthetic", "resnet50", "v100", "eth25"), world_size=8, comm_hook="fp16")
    assert cfg.hook_rates == rates
    assert sim_config(Base("synthetic", "resnet50", "v100", "eth25"), world_size=8).hook_rates == {}
    gpu_model = synthetic("resnet50", "v100-eth25")
    assert arch_defaults(gpu_model, "fp16")["hook_rates"] == rates and "hook_rates" not in arch_defaults(gpu_model)
    assert arch_defaults(gpu_model, "powersgd", 4)["hook_rates"] == gpu_rates("v100", 4)


def test_a_recording_measures_what_a_hook_would_cost_in_its_ranks(tmp_path):
    """Two real gloo ranks; the plain run's meta carries every rate, a replay's hook what-if uses
    them, and the trace refuses a negative one."""
    from ddpsim.learn import learn, replay_config
    from ddpsim.learn.extract import config_from_trace
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record_many
    from ddpsim.trace import TraceFormatError, load_trace

    out = tmp_path / "plain.json"
    record_many([RecordConfig(model="mlp", iters=3, profile_internals=False)], [out])
    trace = load_trace(out)
    rates = trace.meta["hook_rates"]
    assert set(rates) == set(RATES)
    assert all(math.isfinite(v) and v > 0 for v in rates.values()), rates
    assert config_from_trace(trace)["hook_rates"] == rates
    w = learn(trace)
    cfg = replay_config(w, trace, comm_hook="fp16")
    assert cfg.hook_rates["cast_s_per_byte"] == max(rates["cast_s_per_byte"], w.launch_s_per_byte)
    bad = json.loads(out.read_text())
    bad["meta"]["hook_rates"]["cast_s_per_byte"] = -1.0
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(TraceFormatError, match="hook_rates"):
        load_trace(tmp_path / "bad.json")


def test_interleaved_runs_after_a_noop_step_start_together(tmp_path):
    """Note [A noop step leaves the ranks apart]: record_many with a noop run beside an allreduce
    one completes, and both traces hold every iteration of both ranks."""
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record_many
    from ddpsim.trace import load_trace

    outs = [tmp_path / "allreduce.json", tmp_path / "noop.json"]
    record_many([RecordConfig(model="mlp", iters=4, comm_hook=h, profile_internals=False)
                 for h in ("allreduce", "noop")], outs)
    for path in outs:
        trace = load_trace(path)
        assert [len(r.iterations) for r in trace.ranks] == [4, 4]
    assert all(not b.collectives for r in load_trace(outs[1]).ranks for it in r.iterations for b in it.buckets)


def test_the_what_if_page_says_when_a_trace_has_no_hook_costs():
    from ddpsim.learn import alone, learn
    from ddpsim.learn.hookrates import caution
    from ddpsim.trace import load_trace

    old = load_trace(Path(__file__).parent / "fixtures" / "before" / "mlp_2026-11-21.json")  # recorded before hook_rates
    assert "meta.hook_rates" in caution(old, "fp16") and "\n" not in caution(old, "fp16")
    assert caution(old, None) is None and caution(old, "allreduce") is None and caution(None, "fp16") is None
    old.meta["hook_rates"] = {"cast_s_per_byte": 1e-10, "float16_allreduce_cost": 0.9, "bfloat16_allreduce_cost": 1.14}
    assert caution(old, "fp16") is None
    # fp16/bf16 slower than fp32 on the What-if page said nothing of why (the recording's own gloo measured it)
    assert "bfloat16 allreduce at 1.14x" in caution(old, "bf16") and "\n" not in caution(old, "bf16")
    assert "least certain" in caution(old, "noop")  # a CPU recording: gloo's share of the cores
    work = learn(old)  # a recording with its backward alone measured prices noop (learn/alone.py)
    work.meta[alone.KEY] = {"0": 1.0, "1": 1.0}
    assert caution(old, "noop", work, old.world_size) is None
    assert "least certain" in caution(old, "noop", work, 4 * old.world_size)  # not the recorded ranks


def test_hooks_that_send_ddps_own_allreduce_cost_what_it_costs():
    """allreduce_hook, and PowerSGD before start_powerSGD_iter (torch's _allreduce_fut: the division
    and one fp32 allreduce), replay as DDP without a hook; the latency floor is for a hook's own."""
    from ddpsim.learn import learn, replay_config, simulate
    from ddpsim.samples import sample_path
    from ddpsim.trace import load_trace

    trace = load_trace(sample_path("01_mlp_torch_default"))
    w = dataclasses.replace(learn(trace), launch_s_per_byte=3e-10)  # a division of the bucket, priced per byte
    rates = {"allreduce_latency_s": 0.05, "cast_s_per_byte": 1e-10}

    def iteration(**fields):
        return simulate(w, replay_config(w, trace, **fields))[1]["iteration_time_s"]
    plain = iteration()
    assert iteration(comm_hook="allreduce", hook_rates=rates) == pytest.approx(plain, rel=1e-9)
    assert iteration(comm_hook="powersgd", hook_rates=rates) == pytest.approx(plain, rel=1e-9)  # start 1000
    assert iteration(comm_hook="powersgd", powersgd_start_iter=0, hook_rates=rates) > plain + 0.05


def test_a_one_rank_gloo_recording_says_its_16_bit_allreduce_is_unmeasured():
    from ddpsim.learn.hookrates import caution
    from ddpsim.samples import sample_path
    from ddpsim.trace import load_trace

    trace = load_trace(sample_path("01_mlp_torch_default"))
    trace.meta["hook_rates"] = {"cast_s_per_byte": 1e-10, "matmul_s_per_flop": 1e-10}
    assert "no 16-bit allreduce" in caution(trace, "fp16")
    assert caution(trace, "powersgd") is None
    trace.meta["hook_rates"] = {}
    assert "meta.hook_rates" in caution(trace, "fp16")  # an empty dict measured nothing


def test_the_hook_experiments_noise_is_how_far_resampling_moves_the_ratio():
    """experiments.hooks' noise column: 0 between two runs whose steady iterations all take as long;
    1/6 when alternate iterations of one take 1x and 1.5x (the interval of its median); 0 again when
    in every iteration one rank takes 1x and the other 1.5x (iterations are resampled whole)."""
    import dataclasses

    from ddpsim.experiments.hooks import noise, rank_iteration_s, rank_iterations_s
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    def run():
        return simulate(synthetic("resnet50", "v100-eth25"), SimConfig(world_size=2, iters=24))[0]

    def times(which=None):  # each steady iteration's per-rank seconds, of a plain or a slowed run
        return rank_iterations_s(slowed(which) if which else run())

    def slowed(which):  # each rank's iterations its own, the optimizer step longer where which(i, rank)
        trace = run()
        for r in trace.ranks:
            r.iterations = [dataclasses.replace(it, optimizer=dataclasses.replace(
                it.optimizer, end_ns=it.optimizer.end_ns + (it.end_ns - it.forward.start_ns) // 2
                if which(it.iteration, r.rank) else it.optimizer.end_ns)) for it in r.iterations]
        return trace

    plain = times()
    assert noise(times(), plain) == pytest.approx(0, abs=1e-12)
    odd = times(lambda i, rank: i % 2)
    assert rank_iteration_s(odd) > rank_iteration_s(plain)
    assert noise(odd, plain) == pytest.approx(1 / 6, rel=1e-6)
    # 0 but for the traces' whole nanoseconds (4e-9 with ResNet-50's buffer broadcast opening each step)
    assert noise(times(lambda i, rank: (i + rank) % 2), plain) == pytest.approx(0, abs=1e-6)


def test_the_hook_experiment_pools_its_launches():
    """experiments.hooks' rows over launches: the error of the mean times, not the mean of the errors;
    each launch's own error kept; the launches' noise combined as independent (two of 3% and 4%: 2.5%)."""
    from ddpsim.experiments.hooks import pool, table

    def row(plain, measured, predicted, noise):
        return {"model": "mlp", "cap": 0.25, "hook": "fp16", "plain_ms": plain, "measured_ms": measured,
                "predicted_ms": predicted, "error": predicted / measured - 1, "noise": noise}
    (pooled,) = pool([[row(30, 40, 36, 0.03)], [row(34, 60, 66, 0.04)]])
    assert (pooled["plain_ms"], pooled["measured_ms"], pooled["predicted_ms"]) == (32, 50, 51)
    assert pooled["error"] == pytest.approx(0.02)
    assert pooled["launch_errors"] == pytest.approx([-0.1, 0.1])
    assert pooled["noise"] == pytest.approx(0.025)
    text = table([pooled])
    assert "| +2.0% | -10.0 / +10.0 |" in text
    assert "the launches alone: median |error| 10.0%, max 10.0% over 2 predictions" in text
    with pytest.raises(ValueError):  # a launch that lost a row cannot be pooled against the others
        pool([[row(30, 40, 36, 0.03)], []])


def test_a_rate_the_trace_leaves_null_is_unknown_not_a_crash():
    """The reader takes null for an unknown rate; learning the trace crashed on float(None) (the fuzzer's
    case: sample 04 with meta.hook_rates.cast_s_per_byte null)."""
    from ddpsim.learn import hookrates
    from ddpsim.learn.extract import config_from_trace
    from ddpsim.samples import BUNDLED_DIR
    from ddpsim.trace import parse_trace

    raw = json.loads((BUNDLED_DIR / "04_branchy_torch_find_unused.json").read_text())
    raw["meta"]["hook_rates"]["cast_s_per_byte"] = None
    trace = parse_trace(json.dumps(raw))
    assert "cast_s_per_byte" not in hookrates.recorded(trace)["hook_rates"]
    assert "matmul_s_per_flop" in config_from_trace(trace)["hook_rates"]
