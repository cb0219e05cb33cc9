"""``simulate --trace`` and ``sweep --trace`` of a SIMULATED sample simulate the GPU model it was made
from, as the What-if page does (``ddpsim.learn.gpu_model``), not a workload learnt from it as from a
recording: ``sweep --trace`` of sample 20 printed 54 of its 77 rows other than the page's (sample 24:
74), and ``simulate --trace`` of one at another world size stopped for want of a calibration."""
from __future__ import annotations

import json
import shlex

import pytest

from ddpsim import samples
from ddpsim.__main__ import main as cli
from ddpsim.app import command, whatif
from ddpsim.learn import gpu_model, layout_sweep
from ddpsim.trace import load_trace

SIM = {n: str(samples.BUNDLED_DIR / f"{n}.json") for n in (
    "20_sim_resnet50_v100-eth25_w64_default", "22_sim_resnet50_v100-eth25_w64_cap100",
    "24_sim_bert-large_a100-eth100_w64_default")}
S20, S22, S24 = SIM.values()
LAYOUT = ("bucket_cap_mb", "order", "find_unused_parameters", "last_bucket_small")


def page(path: str):
    """(trace, Base, workload, the unchanged choices) as the What-if page opens ``path``."""
    trace = load_trace(path)
    base = whatif.base_for(trace)
    return trace, base, whatif.workload(base, trace), whatif.choices(base)


def page_figure(path: str, world: int) -> dict:
    """The summary the What-if page shows for ``path`` at ``world`` ranks, nothing else changed."""
    trace, base, work, c = page(path)
    cfg = whatif.sim_config(base, c["bucket_cap_mb"], c["order"], c["find_unused_parameters"], c["no_sync_every"],
                            world, c["network"], work=work, trace=trace, last_bucket_small=c["last_bucket_small"])
    return whatif.evaluate(work, base, trace, cfg).summary


def simulate(capsys, *argv) -> tuple[dict, list[str]]:
    assert cli(["simulate", *argv]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    return json.loads(lines[-1]), lines


def figures(summary: dict) -> tuple:
    return summary["iteration_time_s"], summary["exposed_comm_s"]


@pytest.mark.parametrize("path", [S20, S24])
def test_sweep_trace_gives_every_row_of_the_pages_sweep(path, capsys, tmp_path):
    trace, base, work, c = page(path)
    cfg = whatif.sim_config(base, None, "torch", False, c["no_sync_every"], c["world_size"], c["network"],
                            trace_ranks=whatif.SWEEP_RANKS, work=work, trace=trace)
    page_rows, _ = layout_sweep.sweep_rows(work, cfg)
    out = tmp_path / "rows.json"
    assert cli(["sweep", "--trace", path, "--out", str(out)]) == 0
    capsys.readouterr()
    printed = {tuple(r[k] for k in LAYOUT): (f"{r['iteration_time_s']:.6g}", f"{r['exposed_comm_s']:.6g}", r["rank"])
               for r in page_rows}
    rows = json.loads(out.read_text())
    assert len(rows) == len(printed) == whatif.SWEEP_RUNS
    assert {tuple(r[k] for k in LAYOUT): (f"{r['iteration_time_s']:.6g}", f"{r['exposed_comm_s']:.6g}", r["rank"])
            for r in rows} == printed


def test_simulate_trace_prints_the_samples_own_figures_and_the_pages_at_another_world_size(capsys):
    trace = load_trace(S20)
    summary, lines = simulate(capsys, "--trace", S20)
    assert figures(summary) == figures(trace.meta["summary"]) == figures(page_figure(S20, 64))
    assert lines[0].startswith("simulated resnet50@v100-eth25: world size 64") and "3 iterations" in lines[0]
    for world in (8, 256):  # no calibration asked for: the GPU model's network at any size
        summary, _ = simulate(capsys, "--trace", S20, "--world-size", str(world))
        assert figures(summary) == figures(page_figure(S20, world))


def test_the_samples_options_are_kept_and_flags_override_them(capsys):
    summary, lines = simulate(capsys, "--trace", S22)  # recorded with bucket_cap_mb=100: one bucket
    assert summary["n_buckets"] == 1 and figures(summary) == figures(load_trace(S22).meta["summary"])
    summary, _ = simulate(capsys, "--trace", S22, "--bucket-cap-mb", "default")
    assert summary["n_buckets"] == 5 and figures(summary) == figures(load_trace(S20).meta["summary"])


def test_the_pages_command_and_simulate_trace_print_one_figure(capsys):
    """The page's "The same on the command line" writes a simulated sample as ``--trace`` with the controls
    moved; it prints what ``--arch`` with the sample's spec and the same changes prints, and the page's figure."""
    trace, base, work, c = page(S20)
    cmd = command.simulate_command(base, S20, 10.0, "torch", False, 1, 128, base.network, hook="powersgd")
    assert shlex.split(cmd)[4:] == ["--trace", S20, "--world-size", "128", "--bucket-cap-mb", "10", "--comm-hook",
                                    "powersgd", "--powersgd-start-iter", str(whatif.POWERSGD_START)], cmd
    by_trace, _ = simulate(capsys, *shlex.split(cmd)[4:])
    by_arch, _ = simulate(capsys, "--arch", "resnet50", "--hardware", "v100-eth25", "--batch", "32", "--iters",
                          str(gpu_model.ITERS), "--world-size", "128", "--bucket-cap-mb", "10", "--comm-hook",
                          "powersgd", "--powersgd-start-iter", str(whatif.POWERSGD_START))
    cfg = whatif.sim_config(base, 10.0, "torch", False, 1, 128, base.network, work=work, comm_hook="powersgd")
    assert by_trace == by_arch and figures(by_trace) == figures(whatif.evaluate(work, base, trace, cfg).summary)


def test_another_hardware_is_the_same_arch_and_batch_there(capsys):
    by_trace, _ = simulate(capsys, "--trace", S24, "--hardware", "h100-ib400", "--world-size", "16")
    by_arch, _ = simulate(capsys, "--arch", "bert-large", "--hardware", "h100-ib400", "--batch",
                          str(load_trace(S24).meta["workload"]["batch"]), "--iters", str(gpu_model.ITERS),
                          "--world-size", "16")
    assert by_trace == by_arch
    assert figures(by_trace) != figures(simulate(capsys, "--trace", S24, "--world-size", "16")[0])


def test_only_a_simulation_of_a_gpu_model_is_one(tmp_path, capsys):
    assert gpu_model.of_trace(load_trace(S22)) == gpu_model.GpuModel("resnet50", "v100-eth25", 32)
    assert gpu_model.of_trace(load_trace(S22)).config["bucket_cap_mb"] == 100
    recording = samples.BUNDLED_DIR / "01_mlp_torch_default.json"
    assert gpu_model.of_trace(load_trace(recording)) is None
    out = tmp_path / "replayed.json"  # a simulation of a workload learnt from a recording: learnt from again
    simulate(capsys, "--trace", str(recording), "--out", str(out))
    assert load_trace(out).source == "simulated" and gpu_model.of_trace(load_trace(out)) is None
