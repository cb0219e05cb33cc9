"""The What-if page's command line: ``python -m ddpsim simulate ...`` as the page writes it for its
choices prints the page's own iteration time (the page and the command line are one model)."""
import json
import shlex

import pytest

from ddpsim import samples
from ddpsim.app import whatif
from ddpsim.app.command import simulate_command
from ddpsim.cli import main
from ddpsim.trace import load_trace

CASES = [  # (sample, the page's choices that differ from the run as recorded)
    ("02_mlp_torch_cap0.25", {"bucket_cap_mb": None, "order": "reverse"}),  # --bucket-cap-mb default
    ("05_convnet_torch_no_sync3", {"no_sync_every": 1, "broadcast_buffers": False}),
    ("06_transformer_torch_default", {"world_size": 4}),  # the recorded network at another size: fitted ring
    ("01_mlp_torch_default", {"world_size": 8, "network": "eth10", "hook": "fp16"}),  # a CPU run, a flat link
    ("10_h100_resnet18_gloo_2ranks", {"world_size": 16, "network": "ib100", "find_unused_parameters": True}),
    ("20_sim_resnet50_v100-eth25_w64_default", {"world_size": 128, "bucket_cap_mb": 10.0, "hook": "powersgd"}),
    ("24_sim_bert-large_a100-eth100_w64_default", {"world_size": 512, "algo": "tree"}),
    ("20_sim_resnet50_v100-eth25_w64_default", {"last_bucket_small": True}),  # torch's DDP_SET_LAST_BUCKET_CAP=1
    ("03_shuffled_torch_default", {"last_bucket_small": True, "bucket_cap_mb": 1.0}),
]


def page_and_command(name: str, change: dict) -> tuple[float, str]:
    """(the page's simulated iteration time, its command) for ``change`` on sample ``name``."""
    path = samples.BUNDLED_DIR / f"{name}.json"
    trace = load_trace(path)
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    c = {**whatif.choices(base), "hook": None, **change}
    bufs = c["broadcast_buffers"] if "broadcast_buffers" in change else None
    small = c["last_bucket_small"]  # the page's box, which starts as recorded
    kind_trace = base.kind == "trace"
    cfg = whatif.sim_config(base, c["bucket_cap_mb"], c["order"], c["find_unused_parameters"], c["no_sync_every"],
                            c["world_size"], c["network"], work=work if kind_trace else None,
                            trace=trace if kind_trace else None, algo=c["algo"], broadcast_buffers=bufs,
                            comm_hook=c["hook"], last_bucket_small=small)
    _, summary = whatif.run(work, cfg)
    cmd = simulate_command(base, str(path), c["bucket_cap_mb"], c["order"], c["find_unused_parameters"],
                           c["no_sync_every"], c["world_size"], c["network"], c["hook"], bufs, c["algo"],
                           trace if kind_trace else None, small)
    return summary["iteration_time_s"], cmd


@pytest.mark.parametrize("name,change", CASES, ids=[f"{n[:2]}-{'-'.join(c)}" for n, c in CASES])
def test_the_command_prints_the_pages_iteration_time(name, change, capsys):
    page_s, cmd = page_and_command(name, change)
    argv = shlex.split(cmd)
    assert argv[:4] == ["python", "-m", "ddpsim", "simulate"], cmd
    assert main(argv[3:]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["iteration_time_s"] == pytest.approx(page_s, rel=1e-9), cmd


def test_only_the_changes_are_written():
    _, cmd = page_and_command("02_mlp_torch_cap0.25", {})  # nothing changed: the trace replayed as recorded
    assert cmd.endswith("--world-size 2") and "--bucket-cap-mb" not in cmd, cmd
    _, cmd = page_and_command("02_mlp_torch_cap0.25", {"bucket_cap_mb": None})
    assert "--bucket-cap-mb default" in cmd, cmd
    _, cmd = page_and_command("06_transformer_torch_default", {"world_size": 4})
    assert "--no-calibrate" in cmd, cmd  # the page's network, not a measurement the command would make
    _, cmd = page_and_command("20_sim_resnet50_v100-eth25_w64_default", {"hook": "powersgd"})
    assert cmd.endswith("20_sim_resnet50_v100-eth25_w64_default.json --world-size 64 --comm-hook powersgd "
                        "--powersgd-start-iter 2"), cmd  # a simulated trace: its options are the trace's


def test_the_cap_is_a_number_or_default(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--arch", "resnet50", "--bucket-cap-mb", "big"])
    assert "--bucket-cap-mb" in capsys.readouterr().err


SCALING_CASES = [  # (sample, the page's choices that differ from the run as recorded)
    ("02_mlp_torch_cap0.25", {"bucket_cap_mb": 1.0}),  # as recorded: the curve's sizes are 1 and 2
    ("10_h100_resnet18_gloo_2ranks", {"network": "ib100"}),  # a GPU recording, NCCL between its nodes
    ("20_sim_resnet50_v100-eth25_w64_default", {"bucket_cap_mb": 10.0, "algo": "ring"}),  # a GPU model
]


@pytest.mark.parametrize("name,change", SCALING_CASES, ids=[n[:2] for n, _ in SCALING_CASES])
def test_the_scaling_command_prints_the_curves_rows(name, change, capsys):
    from ddpsim.app import scaling

    path = samples.BUNDLED_DIR / f"{name}.json"
    trace = load_trace(path)
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    c = {**whatif.choices(base), "hook": None, **change}
    chosen = dict(bucket_cap_mb=c["bucket_cap_mb"], order=c["order"], find_unused_parameters=c["find_unused_parameters"],
                  no_sync_every=c["no_sync_every"], network=c["network"], algo=c["algo"], broadcast_buffers=None,
                  comm_hook=None, last_bucket_small=c["last_bucket_small"])
    kind_trace = base.kind == "trace"
    rows, _ = scaling.rows(base, trace if kind_trace else None, work, chosen)
    cmd = simulate_command(base, str(path), c["bucket_cap_mb"], c["order"], c["find_unused_parameters"],
                           c["no_sync_every"], c["world_size"], c["network"], None, None, c["algo"],
                           trace if kind_trace else None, c["last_bucket_small"], sizes=[r["world_size"] for r in rows])
    argv = shlex.split(cmd)
    assert argv[:4] == ["python", "-m", "ddpsim", "scaling"] and "--world-size" not in argv, cmd
    assert main(argv[3:]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [r["world_size"] for r in printed] == [r["world_size"] for r in rows] and len(rows) >= 2, cmd
    for p, r in zip(printed, rows):
        assert p["nccl"] == r["nccl"] and p["efficiency"] == pytest.approx(r["efficiency"], rel=1e-9), cmd
        for part in ("iteration_time_s", "compute_s", "exposed_comm_s", "waiting_s"):
            assert p[part] == pytest.approx(r[part], rel=1e-9, abs=1e-12), (cmd, r["world_size"], part)
