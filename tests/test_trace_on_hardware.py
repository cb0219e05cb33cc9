"""A recorded GPU run on a network it did not run on: the What-if page's Network and ``simulate
--hardware`` give one number (NCCL's model on the recording's GPU node, ddpsim/learn/hardware.py),
and the compute keeps the slowdown its collectives caused only where they were NCCL's
(Note [The recorded slowdown goes with its collectives])."""
import json

import pytest

from apputil import run_waiting, with_uploads
from ddpsim import samples
from ddpsim.app import whatif
from ddpsim.cli import main as cli
from ddpsim.learn import learn, replay_config, simulate
from ddpsim.learn.hardware import hardware_of, keeps_slowdown
from ddpsim.sim import Link, ParamSpec, SimConfig, Workload
from ddpsim.sim.network import node_named
from ddpsim.trace import from_dict, load_trace

GLOO_H100 = "10_h100_resnet18_gloo_2ranks.json"  # two ranks sharing one H100 over gloo (ddpsim import)
MIB = 1024 * 1024


@pytest.mark.parametrize("name, node", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H200", "h100"),
                                        ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA A100-SXM4-40GB", "a100"),
                                        ("NVIDIA B200", "b200"), ("NVIDIA L4", None), (None, None),
                                        ("NVIDIA H100 PCIe", None), ("NVIDIA GH200 480GB", None)])
def test_a_gpu_name_finds_its_node(name, node):
    assert node_named(name) == node


KEYS = ("iteration_time_s", "exposed_comm_s", "overlap_fraction")


def whatif_run(trace, net: str, world: int) -> tuple[dict, SimConfig, list[str]]:
    """The What-if page's headline figures (iteration, exposed comm, overlap), config and cautions."""
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    cfg = whatif.sim_config(base, None, "torch", False, 1, world, net, work=work, trace=trace)
    out = whatif.evaluate(work, base, trace, cfg)
    return {k: out.summary[k] for k in KEYS}, cfg, out.cautions


def cli_run(capsys, *argv) -> dict:
    assert cli(list(argv)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return {k: summary[k] for k in KEYS}


@pytest.mark.parametrize("net, world", [("ib100", 8), ("ib400", 32), ("nvlink", 16)])
def test_the_whatif_page_and_simulate_hardware_give_one_number(capsys, net, world):
    """Before, the page priced a GPU recording's ib100 as one flat datasheet link (27.4 ms at 8 ranks)
    where ``simulate --hardware h100-ib100`` ran NCCL's two-level model (26.1 ms); and it summarised 2
    simulated ranks where simulate summarises 8 (exposed comm 2.1 against 2.8 ms)."""
    path = samples.BUNDLED_DIR / GLOO_H100
    page, cfg, said = whatif_run(load_trace(path), net, world)
    assert cfg.hardware == f"h100-{net}" and cfg.bandwidth_gbps is None
    assert page == pytest.approx(cli_run(capsys, "simulate", "--trace", str(path), "--hardware", f"h100-{net}",
                                         "--world-size", str(world)), abs=1e-6)
    said = next(c for c in said if c.startswith("The network is not the recorded one"))
    assert "NCCL on H100-SXM5 nodes" in said and f"--hardware h100-{net}" in said
    assert ("fit in one node of 8: only its NVLink is used" in said) == (world <= 8)  # ib100 = nvlink there


def test_the_bundled_nccl_recording_is_priced_as_the_cli_prices_it(capsys):
    """An NCCL recording on an H200 (meta.gpu): the page gave 69.7 ms at 8 ranks over a flat ib100 link,
    ``simulate --hardware h100-ib100`` 30.6 ms; an NCCL recording keeps its learnt slowdown (none here)."""
    path = samples.BUNDLED_DIR / "11_h200_resnet50_nccl_1rank.json"
    page, cfg, said = whatif_run(load_trace(path), "ib100", 8)
    assert cfg.hardware == "h100-ib100"
    assert any("the recording's NVIDIA H200 is modelled as an H100 node" in c for c in said), said
    assert page == pytest.approx(cli_run(capsys, "simulate", "--trace", str(path), "--hardware", "h100-ib100",
                                         "--world-size", "8"), abs=1e-6)


def test_sweep_on_hardware_is_simulate_on_hardware(capsys):
    """``sweep --trace --hardware`` dropped the recorded slowdown where ``simulate`` kept it: now one rule."""
    path = str(samples.BUNDLED_DIR / GLOO_H100)
    one = cli_run(capsys, "simulate", "--trace", path, "--hardware", "h100-ib100", "--world-size", "16",
                  "--bucket-cap-mb", "5")["iteration_time_s"] * 1e3
    assert cli(["sweep", "--trace", path, "--hardware", "h100-ib100", "--world-size", "16", "--bucket-cap-mb", "5"]) == 0
    row = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert row["iteration_time_s"] * 1e3 == pytest.approx(one, abs=1e-6)


def test_a_cpu_recording_keeps_the_flat_datasheet_link():
    trace = load_trace(samples.BUNDLED_DIR / "01_mlp_torch_default.json")
    assert hardware_of(trace, "ib100") is None
    _, cfg, said = whatif_run(trace, "ib100", 8)
    assert cfg.hardware is None and cfg.bandwidth_gbps == 90
    assert any("datasheet figures, as one flat link" in c for c in said)


def recording(backend: str) -> tuple[Workload, object]:
    """A 2-rank run whose compute slowed 40% while its collectives ran, relabelled as recorded with ``backend``."""
    w = Workload(name="fixture", params=[ParamSpec(i, f"p{i}", s * MIB, device="cuda:0") for i, s in enumerate([4, 4, 8, 8])],
                 ready_order=[3, 2, 1, 0], grad_compute_s=[0.004, 0.003, 0.002, 0.001],
                 link=Link(alpha_s=1e-4, bandwidth_Bps=2e9, interference=0.4), forward_s=0.005, optimizer_s=0.002)
    trace, _ = simulate(w, SimConfig(world_size=2, bucket_cap_mb=4, iters=6, shared_core=False))
    d = trace.to_dict()
    d["source"] = "real"
    d["meta"].update(backend=backend, options={"bucket_cap_mb": 4}, gpu="NVIDIA A100-SXM4-80GB",
                     placement={"device": "cuda", "reason": "fixture"})
    run = from_dict(d)
    return learn(run), run


def test_the_recorded_slowdown_stays_only_with_nccl_collectives():
    w, run = recording("nccl")
    assert w.link.interference > 0.1  # learnt from the run
    cfg = replay_config(w, run, world_size=16, hardware=hardware_of(run, "ib200"))
    assert cfg.hardware == "a100-ib200" and cfg.interference == keeps_slowdown(w, run) == w.link.interference
    gloo_w, gloo = recording("gloo")
    assert keeps_slowdown(gloo_w, gloo) is None
    assert replay_config(gloo_w, gloo, world_size=16, hardware="a100-ib200").interference == 0.0
    assert replay_config(gloo_w, gloo, world_size=16, hardware="a100-ib200", interference=0.2).interference == 0.2


def test_the_page_offers_a_gpu_recording_the_networks_between_gpus():
    trace = load_trace(samples.BUNDLED_DIR / GLOO_H100)
    at = with_uploads({"r18": trace}, "whatif.py", "r18")
    net = next(s for s in at.selectbox if s.label == "Network")
    assert "cpugloo" not in net.options and any(o.startswith("nvlink: NVLink inside a node, ib400") for o in net.options)
    next(s for s in at.select_slider if s.label.startswith("World size")).set_value(8).run()
    run_waiting(next(s for s in at.selectbox if s.label == "Network").set_value("ib100").run())  # the sweep's caption
    assert not at.exception and not at.error, [e.value for e in at.error]
    said = " ".join(w.value for w in at.warning)
    assert "NCCL on H100-SXM5 nodes: NVLink x8" in said and "ran 2.31x as long" in said
    assert "modelled as an H100 node" not in said  # an H100 recording on H100 nodes
    assert any("keeps 2 of the ranks" in c.value and "the figure above, which keeps 8." in c.value for c in at.caption)
