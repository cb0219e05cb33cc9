"""A 1-rank trace has no network to learn (learn.linkfit Note [No network from one rank]):
simulating more ranks asks for one, in one line, from simulate and validate --against alike;
--hardware gives it (the GPU profile's NVLink / fabric). Its replay at one rank keeps the recorded
collectives' own cost (Note [One rank still pays for its collectives])."""
import json
from pathlib import Path

import pytest

from ddpsim import load_trace
from ddpsim.analysis import summarize
from ddpsim.cli import main as cli
from ddpsim.learn import learn, replay_config, simulate, workload_from_trace
from ddpsim.sim import Link, ParamSpec, SimConfig, Workload
from ddpsim.trace import from_dict

MIB = 1024 * 1024


def recorded(tmp_path, world_size: int):
    """A simulated run relabelled as a recording (NCCL): ``world_size`` ranks."""
    w = Workload(name="fixture", params=[ParamSpec(i, f"p{i}", s * MIB, device="cuda:0")
                                         for i, s in enumerate([1, 1, 3, 3])],
                 ready_order=[3, 2, 1, 0], grad_compute_s=[0.004, 0.003, 0.002, 0.001],
                 link=Link(alpha_s=1e-4, bandwidth_Bps=1e9), forward_s=0.005, optimizer_s=0.002)
    trace, _ = simulate(w, SimConfig(world_size=world_size, bucket_cap_mb=2, iters=5))
    d = trace.to_dict()
    d["source"] = "real"
    d["meta"].update(backend="nccl", options={"bucket_cap_mb": 2})
    path = tmp_path / f"ws{world_size}.json"
    path.write_text(json.dumps(d))
    return path, from_dict(d)


def test_one_rank_trace_asks_for_a_network(tmp_path, capsys):
    path, trace = recorded(tmp_path, 1)
    assert workload_from_trace(trace).meta["comm_fit"]["from"] == "none"
    assert cli(["simulate", "--trace", str(path), "--world-size", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "1 rank(s)" in err and "--hardware" in err and "64 ranks" in err
    assert cli(["simulate", "--trace", str(path)]) == 0  # its own world size needs no network


def test_validate_against_more_ranks_says_the_same(tmp_path, capsys):
    one, _ = recorded(tmp_path, 1)
    four, _ = recorded(tmp_path, 4)
    assert cli(["validate", "--trace", str(one), "--against", str(four), "--iters", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no collective to learn a network from" in err and "4 ranks" in err


def test_hardware_gives_the_network(tmp_path, capsys):
    path, _ = recorded(tmp_path, 1)
    summaries = {}
    for hw in ("h100-nvlink", "v100-eth10"):
        assert cli(["simulate", "--trace", str(path), "--hardware", hw, "--world-size", "16", "--jitter", "0"]) == 0
        summaries[hw] = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summaries["h100-nvlink"]["link"]["name"] != summaries["v100-eth10"]["link"]["name"]
    # 16 ranks leave the node: 10 GbE is slower than H100 nodes joined by NDR InfiniBand
    assert summaries["v100-eth10"]["iteration_time_s"] > summaries["h100-nvlink"]["iteration_time_s"]
    assert cli(["simulate", "--trace", str(path), "--hardware", "z9-nvlink", "--world-size", "8"]) == 2
    assert "unknown hardware" in capsys.readouterr().err
    assert cli(["simulate", "--trace", str(path), "--bandwidth-gbps", "100", "--world-size", "8"]) == 0


SAMPLES = Path(__file__).resolve().parents[1] / "ddpsim" / "samples"


def test_a_one_rank_collective_costs_its_recorded_line_at_one_rank_only():
    link = Link(alpha_s=1e-5, bandwidth_Bps=1e9, one_rank=(2e-4, 1e-10))
    assert link.allreduce_s(1_000_000, 1) == pytest.approx(2e-4 + 1e-4)
    assert link.allreduce_s(1_000_000, 2) == pytest.approx(Link(alpha_s=1e-5, bandwidth_Bps=1e9).allreduce_s(1_000_000, 2))
    assert Link().allreduce_s(1_000_000, 1) == 0.0  # no line: a collective over one rank is free
    with pytest.raises(ValueError, match="one-rank collective"):
        Link(one_rank=(float("nan"), 0.0))


def test_a_one_rank_replay_keeps_the_recordings_communication():
    """learn.linkfit Note [One rank still pays for its collectives], on the real 1-rank H200 recording:
    the replay's exposed communication is the recording's, not none (its overlap is none, as the recording's:
    Note [One rank communicates nothing]). At another world size,
    with no network named, its GPU's node (learn/hardware.py Note [A GPU recording at another world size]):
    the same as naming it; without that node (no ``meta.gpu``) it asks for a network."""
    trace = load_trace(SAMPLES / "11_h200_resnet50_nccl_1rank.json")
    w = learn(trace)
    assert w.link.one_rank is not None and w.meta["comm_fit"]["from"] == "none"
    _, summary = simulate(w, replay_config(w, trace))
    real = summarize(trace)
    assert real["exposed_comm_s"] > 0 and summary["exposed_comm_s"] > 0
    assert summary["exposed_comm_s"] < 3 * real["exposed_comm_s"]
    assert not summary["communicates"] and not real["communicates"], (summary, real)
    at8 = simulate(w, replay_config(w, trace, world_size=8, jitter=0.0))[1]
    named = simulate(w, replay_config(w, trace, world_size=8, jitter=0.0, hardware="h100-nvlink"))[1]
    assert {**at8, "sim_wall_s": 0} == {**named, "sim_wall_s": 0}
    assert at8["link"]["name"].startswith("NCCL on H100-SXM5 nodes") and at8["exposed_comm_s"] > 0
    trace.meta.pop("gpu")
    with pytest.raises(ValueError, match="no collective to learn a network from"):
        simulate(w, replay_config(w, trace, world_size=8))


def test_bandwidth_gives_the_network_and_names_it(tmp_path, capsys):
    """--bandwidth-gbps on a 1-rank trace: the link is named as the user's, not the trace's "none"."""
    path, _ = recorded(tmp_path, 1)
    assert cli(["simulate", "--trace", str(path), "--world-size", "8", "--bandwidth-gbps", "100", "--jitter", "0"]) == 0
    link = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["link"]
    assert link["name"].startswith("a flat ring at --bandwidth-gbps") and link["one_rank"] is None
    assert link["bandwidth_Bps"] == pytest.approx(100e9 / 8) and link["alpha_s"] == 0.0
