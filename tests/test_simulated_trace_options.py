"""A SIMULATED trace of a GPU model carries every option it ran with into ``simulate --trace`` (its
rate, hook, noise, Join, stragglers, steps, seed), the What-if page carries them too, and the input flags that do not apply to an input are refused in one line. A reviewer found
``simulate --trace`` of ``--arch resnet50 --hardware v100-eth25 --world-size 4 --tflops 20`` at 123.740 ms
against 63.366 ms (the same with --jitter, --naive, --comm-hook, --uneven/--join dropped), and
``--straggler 1:2 --out`` refusing to write ("rank 1 appears twice")."""
from __future__ import annotations

import json
import shlex

import pytest

from ddpsim import samples
from ddpsim.__main__ import main as cli
from ddpsim.app import command, whatif
from ddpsim.learn import gpu_model
from ddpsim.sim import SimConfig, simulate, synthetic
from ddpsim.trace import load_trace, save_trace

ARCH = ["--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "4"]
RECORDING = str(samples.BUNDLED_DIR / "01_mlp_torch_default.json")


def run(capsys, *argv) -> list[str]:
    """stdout's lines of ``ddpsim simulate argv`` (the first, which names the output file, left out)."""
    assert cli(["simulate", *argv]) == 0
    return capsys.readouterr().out.strip().splitlines()[1:]


def refused(capsys, *argv) -> str:
    assert cli(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    return err


@pytest.mark.parametrize("options", [
    ["--tflops", "20"], ["--jitter", "0.2"], ["--naive"], ["--overlap"], ["--comm-hook", "fp16"],
    ["--world-size", "2", "--uneven", "1", "--join", "--iters", "6"], ["--straggler", "1:2"],
    ["--seed", "3", "--order", "random", "--jitter", "0.1", "--jitter-mode", "sampled", "--iters", "5"],
    ["--comm-hook", "powersgd", "--powersgd-start-iter", "2", "--powersgd-rank", "2"],
    ["--algo", "tree", "--no-broadcast-buffers", "--first-bucket-cap-mb", "5"]], ids=lambda o: " ".join(o))
def test_simulate_trace_of_a_simulated_trace_prints_what_made_it(options, capsys, tmp_path):
    out = tmp_path / "x.json"
    made = run(capsys, *ARCH, *options, "--out", str(out))
    again = run(capsys, "--trace", str(out))
    assert again == made  # every line: the figures, the Join line, the JSON summary
    assert json.loads(again[-1])["iteration_time_s"] == load_trace(out).meta["summary"]["iteration_time_s"]


def test_another_hardware_takes_that_gpus_rates_and_noise(capsys, tmp_path):
    """Options the GPU model derives (a hook's compute rates, the profile's rank spread) follow --hardware;
    the ones given (the hook) stay; a --tflops of another GPU is said to be dropped."""
    out = tmp_path / "x.json"
    run(capsys, *ARCH, "--comm-hook", "fp16", "--out", str(out))
    on_h100 = run(capsys, "--trace", str(out), "--hardware", "h100-ib400")
    assert on_h100 == run(capsys, *ARCH[:2], "--hardware", "h100-ib400", "--world-size", "4", "--comm-hook", "fp16")
    run(capsys, *ARCH, "--tflops", "20", "--out", str(out))
    assert cli(["simulate", "--trace", str(out), "--hardware", "h100-ib400"]) == 0
    assert "ran at 20 TFLOP/s (--tflops) on v100-eth25" in capsys.readouterr().err
    assert gpu_model.of_trace(load_trace(out)).tflops == 20


def page(path):
    trace = load_trace(path)
    base = whatif.base_for(trace, str(path))
    work = whatif.workload(base, trace)
    c = whatif.choices(base)
    cfg = whatif.sim_config(base, c["bucket_cap_mb"], c["order"], c["find_unused_parameters"], c["no_sync_every"],
                            c["world_size"], c["network"], work=work, trace=trace)
    return trace, base, c, whatif.evaluate(work, base, trace, cfg)


def test_the_page_carries_steps_seed_and_every_other_option(capsys, tmp_path):
    out = tmp_path / "x.json"
    made = run(capsys, *ARCH, "--order", "random", "--seed", "3", "--iters", "6", "--out", str(out))
    trace, base, c, outcome = page(out)
    assert outcome.summary["iteration_time_s"] == json.loads(made[-1])["iteration_time_s"]
    assert not outcome.cautions, outcome.cautions
    cmd = command.simulate_command(base, str(out), c["bucket_cap_mb"], c["order"], False, 1, 4, base.network)
    assert json.loads(run(capsys, *shlex.split(cmd)[4:])[-1]) == json.loads(made[-1])  # the page's command
    made = run(capsys, *ARCH, "--jitter", "0.2", "--naive", "--tflops", "20", "--out", str(out))
    trace, base, c, outcome = page(out)
    assert not outcome.cautions, outcome.cautions
    assert outcome.summary == {**json.loads(made[-1]), "sim_wall_s": outcome.summary["sim_wall_s"]}
    cmd = command.simulate_command(base, str(out), c["bucket_cap_mb"], c["order"], False, 1, 4, base.network)
    assert shlex.split(cmd)[4:] == ["--trace", str(out), "--world-size", "4"]  # nothing moved: nothing to add
    for name in ("20_sim_resnet50_v100-eth25_w64_default", "24_sim_bert-large_a100-eth100_w64_default"):
        outcome = page(str(samples.BUNDLED_DIR / f"{name}.json"))[3]
        assert not outcome.cautions, name


def test_flags_an_input_does_not_take_are_refused_in_one_line(capsys, tmp_path):
    for flag in ("--batch", "--tflops"):
        for cmd in ("simulate", "sweep"):
            err = refused(capsys, cmd, "--trace", RECORDING, flag, "20")
            assert f"{flag} applies to --arch or a SIMULATED trace" in err and "not to a recording" in err
    out = tmp_path / "x.json"
    run(capsys, *ARCH, "--out", str(out))
    for source in (["--trace", str(out)], ["--arch", "resnet50"]):
        assert "--calibration applies to a recording" in refused(capsys, "simulate", *source, "--calibration", "/nonexist")
    for source in (["--trace", str(out)], ["--trace", RECORDING], ["--arch", "resnet50"]):
        err = refused(capsys, "simulate", *source, "--world-size", "0")
        assert err.endswith("error: --world-size must be between 1 and 10,000,000 ranks, not 0")


@pytest.mark.parametrize("world,straggler,kept", [(4, 1, 8), (4, 0, 8), (4, 3, 8), (16, 5, 8), (16, 2, 3), (3, 1, 2)])
def test_a_straggler_among_identical_ranks_is_written_once(world, straggler, kept, tmp_path):
    cfg = SimConfig(world_size=world, stragglers={straggler: 2.0}, trace_ranks=kept, iters=3)
    trace, _ = simulate(synthetic("resnet50", "v100-eth25"), cfg)
    save_trace(trace, tmp_path / "s.json")
    ranks = [r.rank for r in load_trace(tmp_path / "s.json").ranks]
    assert ranks == sorted(set(ranks)) and straggler in ranks and all(0 <= r < world for r in ranks)
    assert len(ranks) == 1 + min(world - 1, kept)
