"""The user's path: a recorded run replayed, another world size asked for, one overlap figure.

``simulate --trace``, ``validate --trace`` and the What-if page learn the same workload
(``ddpsim.learn.learn``) and build the same configuration (``replay_config``); asked for a
world size the trace did not run, they use its calibration, measure one here, or refuse in
one line (``ddpsim.experiments.worldsize``).
"""
import functools
import json
import os
import socket
import statistics

import pytest

from ddpsim import samples
from ddpsim.cli import main as cli
from ddpsim.experiments import worldsize
from ddpsim.experiments.validate import validate
from ddpsim.trace import from_dict, load_trace

REAL = sorted(p for p in samples.BUNDLED_DIR.glob("0*.json"))  # the bundled real recordings
MLP = samples.BUNDLED_DIR / "01_mlp_torch_default.json"


@functools.lru_cache(maxsize=None)
def replay(path) -> dict:
    return validate(load_trace(path))


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.stem)
def test_replay_reproduces_each_bundled_recording(path):
    res = replay(path)
    err = res["metrics"]["iteration_time_s"]["rel_error"]
    assert abs(err) <= 0.06, f"{path.stem}: replay {err:+.1%}"
    assert res["config"]["recorded_ranks"], "the recorded ranks are replayed"


def test_replay_median_error_is_within_3_percent():
    errors = [abs(replay(p)["metrics"]["iteration_time_s"]["rel_error"]) for p in REAL]
    assert len(errors) == 8 and statistics.median(errors) <= 0.03, errors


def last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def test_simulate_and_validate_give_the_same_number(capsys):
    assert cli(["simulate", "--trace", str(MLP)]) == 0
    simulated = last_json(capsys.readouterr().out)["iteration_time_s"]
    assert cli(["validate", "--trace", str(MLP)]) == 0
    predicted = last_json(capsys.readouterr().out)["iteration_time_s"]["predicted"]
    assert simulated == predicted


def test_validate_refuses_what_it_cannot_compare_before_any_calibration(capsys):
    """A simulated --against at another world size was calibrated for 13 s, then refused."""
    sim = samples.BUNDLED_DIR / "20_sim_resnet50_v100-eth25_w64_default.json"
    for args, said in ((["--against", str(sim)], f"{sim} is a simulated trace: validate compares against a "
                                                 "recorded (source real) one"),
                       (["--out", ""], "--out wants a file name, not an empty one")):
        assert cli(["validate", "--trace", str(MLP), *args]) == 2
        assert capsys.readouterr().err == f"ddpsim validate: error: {said}\n"  # one line: nothing measured


def copy_of(path, tmp_path, **meta):
    """A bundled recording with its meta changed (e.g. recorded on this host), saved and loaded."""
    d = json.loads(path.read_text())
    d["meta"].update(meta)
    out = tmp_path / path.name
    out.write_text(json.dumps(d))
    return out, from_dict(d)


def test_what_another_world_size_does(tmp_path):
    _, here = copy_of(MLP, tmp_path, hosts=[socket.gethostname()])
    assert worldsize.plan(here, 2).action == "recorded"
    assert worldsize.plan(here, 4).action == "measure"
    assert worldsize.plan(here, 4, calibrate=False).action == "uncalibrated"
    assert worldsize.plan(here, 1).action == "alone"  # one rank: no allreduce to measure
    if os.cpu_count() < 128:  # measured, 128 ranks would share the cores, and the simulator refuses that
        beyond = worldsize.plan(here, 128)
        assert beyond.action == "uncalibrated" and "ranks that share cores are simulated only up to 64; so each rank is given a core" in beyond.message
    _, elsewhere = copy_of(MLP, tmp_path, hosts=["another-host"])
    refusal = worldsize.plan(elsewhere, 4)
    assert refusal.action == "refuse" and "another host (another-host)" in refusal.message and "--hardware" in refusal.message
    _, nameless = copy_of(MLP, tmp_path, hosts=[])
    for r in nameless.ranks:  # another host's ranks, without meta.hosts
        r.host = "another-host"
    assert "another host (unknown)" in worldsize.plan(nameless, 4).message  # it spelt "u, n, k, n, o, w, n"
    nameless.source = "simulated"
    simulated = nameless
    assert "the trace is a simulated trace" in worldsize.plan(simulated, 4).message
    _, gpu = copy_of(MLP, tmp_path, backend="nccl")
    assert worldsize.plan(gpu, 8).action == "refuse" and "GPU trace" in worldsize.plan(gpu, 8).message
    assert worldsize.plan(gpu, 1).action == "alone"  # nor a network to ask for
    cal = {"world_sizes": {"2": {}, "4": {}}, "fit": {"wall": {}}}
    _, calibrated = copy_of(MLP, tmp_path, hosts=["another-host"], calibration=cal)
    assert worldsize.plan(calibrated, 4).action == "calibrated"


def test_no_calibrate_says_so_in_one_line(tmp_path, capsys):
    path, _ = copy_of(MLP, tmp_path, hosts=[socket.gethostname()])
    assert cli(["simulate", "--trace", str(path), "--world-size", "4", "--no-calibrate"]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "simulated in" not in line]
    assert len(err) == 1 and "nothing was measured at 4 ranks" in err[0], err


def test_another_host_asks_for_a_network_in_one_line(tmp_path, capsys):
    path, _ = copy_of(MLP, tmp_path, hosts=["another-host"])
    assert cli(["simulate", "--trace", str(path), "--world-size", "4"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--hardware" in err and "4 ranks" in err
    assert cli(["simulate", "--trace", str(path), "--world-size", "4", "--bandwidth-gbps", "10"]) == 0


def one_rank_gloo(tmp_path):
    """A bundled 2-rank CPU recording cut to its rank 0, as a 1-rank gloo run on this host."""
    d = json.loads(MLP.read_text())
    d["ranks"] = d["ranks"][:1]
    d["meta"].update(world_size=1, hosts=[socket.gethostname()])
    for it in d["ranks"][0]["iterations"]:
        it["buckets"], it["bitmap_allreduce"] = [], None
    path = tmp_path / "one.json"
    path.write_text(json.dumps(d))
    return path


def test_one_rank_cpu_trace_asks_for_a_network(tmp_path, capsys):
    path = one_rank_gloo(tmp_path)
    assert cli(["simulate", "--trace", str(path), "--world-size", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "1 rank(s)" in err and "64 ranks" in err and "--hardware" in err
    assert cli(["simulate", "--trace", str(path), "--world-size", "64", "--hardware", "h100-ib400"]) == 0


@pytest.mark.slow
def test_another_world_size_is_measured_here(tmp_path, capsys):
    path, _ = copy_of(MLP, tmp_path, hosts=[socket.gethostname()])
    assert cli(["simulate", "--trace", str(path), "--world-size", "3", "--out", str(tmp_path / "sim.json")]) == 0
    err = capsys.readouterr().err
    assert "measuring the allreduce at 2 and 3 ranks" in err and "measured in" in err
    assert "the trace file is not changed" in err and "calibrate --world-sizes 2,3 --trace" in err
    assert "calibration" not in load_trace(path).meta  # as it says: the file is left as it was
    sim = load_trace(tmp_path / "sim.json")
    assert "measured at k=3" in sim.meta["link"]["name"]


@pytest.mark.parametrize("command", [["simulate", "--world-size", "4"], ["scaling", "--world-sizes", "4"],
                                     ["sweep", "--world-size", "4"]], ids=lambda c: c[0])
@pytest.mark.parametrize("flags, says", [
    (["--jitter=-1"], "jitter must be"),
    (["--straggler", "9:2"], "straggler rank 9 is not in 0..3"),
    (["--order", "1,1"], "order"),
    (["--powersgd-rank", "2"], "need --comm-hook powersgd"),
])
def test_a_flag_refused_is_said_before_measuring(tmp_path, capsys, command, flags, says):
    """Every such flag was refused after the 6-40 s measurement of the allreduce at the new world size."""
    if command[0] == "sweep" and flags[0] == "--powersgd-rank":
        pytest.skip("sweep has no --powersgd-rank")
    path, _ = copy_of(MLP, tmp_path, hosts=[socket.gethostname()])
    assert worldsize.plan(load_trace(path), 4).action == "measure"  # what the flag's check now comes before
    assert cli([command[0], "--trace", str(path), *command[1:], *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "measur" not in err[0], err
