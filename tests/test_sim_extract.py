"""Workload extraction from traces, and the simulate/sweep command lines."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpsim.learn import simulate, workload_from_trace
from ddpsim.sim import Link, ParamSpec, SimConfig, Workload
from ddpsim.trace import from_dict

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[1]


def workload():
    sizes = [1, 1, 3, 3]  # MiB; ready 3,2,1,0 -> buckets [3], [2], [1, 0] with a 2 MiB cap
    return Workload(
        name="fixture", params=[ParamSpec(i, f"p{i}", s * MIB) for i, s in enumerate(sizes)],
        ready_order=[3, 2, 1, 0], grad_compute_s=[0.004, 0.003, 0.002, 0.001],
        link=Link(alpha_s=0.001, bandwidth_Bps=1e9, concurrency=1),
        forward_s=0.005, optimizer_s=0.002, finalize_s=0.0005, step_gap_s=0.0001, iter_gap_s=0.0003)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A simulated run standing in for a recording (source relabelled 'real')."""
    trace, s = simulate(workload(), SimConfig(world_size=4, bucket_cap_mb=2, iters=5))
    d = trace.to_dict()
    d["source"] = "real"
    d["meta"]["options"] = {"bucket_cap_mb": 2, "find_unused_parameters": False}
    path = tmp_path_factory.mktemp("sim") / "real.json"
    path.write_text(json.dumps(d))
    return path, from_dict(d), s


def test_extraction_recovers_the_workload(recorded):
    _, trace, _ = recorded
    w = workload_from_trace(trace)
    assert w.ready_order == [3, 2, 1, 0]
    assert w.grad_compute_s == pytest.approx([0.004, 0.003, 0.002, 0.001], abs=1e-8)
    assert w.forward_s == pytest.approx(0.005, abs=1e-8)
    assert w.optimizer_s == pytest.approx(0.002, abs=1e-8)
    assert w.finalize_s == pytest.approx(0.0005, abs=1e-8)
    assert w.iter_gap_s == pytest.approx(0.0003, abs=1e-8)
    assert w.link.alpha_s == pytest.approx(0.001, rel=1e-4)
    assert w.link.bandwidth_Bps == pytest.approx(1e9, rel=1e-4)
    assert w.unused == [] and w.link.interference == 0.0


def test_resimulating_a_trace_reproduces_it(recorded):
    _, trace, s = recorded
    _, s2 = simulate(trace, SimConfig(world_size=4, bucket_cap_mb=2, iters=5, concurrency=1))
    assert s2["iteration_time_s"] == pytest.approx(s["iteration_time_s"], rel=1e-6)
    assert s2["exposed_comm_s"] == pytest.approx(s["exposed_comm_s"], rel=1e-5)


def test_interference_is_recovered_from_gradient_gaps():
    w = workload()
    w.link = Link(alpha_s=0.001, bandwidth_Bps=1e9, concurrency=1, interference=0.5)
    w.grad_compute_s = [0.004, 0.004, 0.004, 0.004]
    trace, _ = simulate(w, SimConfig(world_size=2, bucket_cap_mb=2, iters=4))
    got = workload_from_trace(trace)
    assert got.link.interference == pytest.approx(0.5, rel=0.05)
    assert got.grad_compute_s == pytest.approx([0.004] * 4, rel=1e-4)


def test_trace_without_gradient_events_is_valueerror(recorded):
    _, trace, _ = recorded
    d = trace.to_dict()
    for r in d["ranks"]:
        for it in r["iterations"]:
            it["grad_ready"] = []
    with pytest.raises(ValueError, match="no gradient events"):
        simulate(from_dict(d))


def test_trace_without_its_parameter_table_is_one_line(recorded, tmp_path, capsys):
    _, trace, _ = recorded
    d = trace.to_dict()
    d["params"] = []  # the reader takes it (a trace may not know its parameters); their bytes are unknown
    with pytest.raises(ValueError, match="no parameter table"):
        simulate(from_dict(d))
    (tmp_path / "noparams.json").write_text(json.dumps(d))
    rc, _, err = run_cli(["simulate", "--trace", str(tmp_path / "noparams.json")], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "no parameter table" in err


def run_cli(argv, capsys):
    from ddpsim import __main__ as cli

    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_simulate_last_line_is_json(recorded, tmp_path, capsys):
    path, _, _ = recorded
    out_path = tmp_path / "sim.json"
    rc, out, _ = run_cli(["simulate", "--trace", str(path), "--world-size", "16", "--order", "ready",
                          "--bandwidth-gbps", "100", "--latency-us", "5", "--algo", "tree",
                          "--iters", "3", "--seed", "1", "--out", str(out_path)], capsys)
    assert rc == 0
    last = json.loads(out.strip().splitlines()[-1])
    assert {"iteration_time_s", "exposed_comm_s", "overlap_fraction"} <= set(last)
    sim = json.loads(out_path.read_text())
    assert sim["source"] == "simulated" and sim["meta"]["world_size"] == 16


@pytest.mark.parametrize("argv, message", [
    (["--bucket-cap-mb", "nan"], "bucket_cap_mb must be a finite number"),  # torch takes 0 and -2
    (["--bucket-cap-mb", "-2", "--find-unused-parameters"], "negative bucket cap"),  # not this: torch refuses
    (["--world-size", "0"], "--world-size must be between 1 and"), (["--bandwidth-gbps", "nan"], "bandwidth"),
    (["--bandwidth-gbps", "-1"], "bandwidth"), (["--order", "upside"], "order"),
])
def test_cli_bad_input_is_one_line_exit_2(recorded, argv, message, capsys):
    path, _, _ = recorded
    rc, out, err = run_cli(["simulate", "--trace", str(path), *argv], capsys)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and message in err


def test_cli_arch_and_sweep(tmp_path, capsys):
    rc, out, _ = run_cli(["simulate", "--arch", "resnet50", "--hardware", "v100-ib100",
                          "--world-size", "32", "--iters", "2"], capsys)
    assert rc == 0 and json.loads(out.splitlines()[-1])["world_size"] == 32
    table = tmp_path / "t.csv"
    rc, out, _ = run_cli(["sweep", "--arch", "gpt2", "--hardware", "a100-ib200", "--world-size", "8,64",
                          "--bucket-cap-mb", "5,25", "--iters", "2", "--out", str(table)], capsys)
    assert rc == 0
    rows = table.read_text().splitlines()
    assert len(rows) == 5 and "best" in rows[0] and sum(r.endswith("True") for r in rows) == 1
    assert json.loads(out.splitlines()[-1])["best"] is True


def test_cli_says_the_waiting_and_nccls_choice_as_the_what_if_page_does(capsys):
    """`simulate` printed neither what waiting for stragglers costs nor which NCCL algorithm ran, and
    called a no_sync micro-step an iteration."""
    from ddpsim.app import whatif

    rc, out, _ = run_cli(["simulate", "--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "64"], capsys)
    base = whatif.Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 64})
    work = whatif.workload(base, None)
    page = whatif.evaluate(work, base, None, whatif.sim_config(base, None, "torch", False, 1, 64, "eth25"))
    assert rc == 0 and f"waiting for stragglers: {page.waits[0] * 1e3:.3f} ms of the" in out, out
    assert "NCCL: ring/Simple (5 buckets)" in out
    rc, out, _ = run_cli(["simulate", "--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "64",
                          "--comm-hook", "noop"], capsys)  # nothing sent: nobody waits, no algorithm runs
    assert rc == 0 and "waiting for stragglers" not in out and "NCCL:" not in out
    rc, out, _ = run_cli(["simulate", "--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "64",
                          "--comm-hook", "fp16"], capsys)  # half-size collectives: the fp32 buckets' choice is not theirs
    assert rc == 0 and "NCCL:" not in out and "waiting for stragglers" in out
    rc, out, _ = run_cli(["simulate", "--arch", "resnet50", "--hardware", "v100-eth25", "--world-size", "64",
                          "--no-sync-every", "4"], capsys)
    assert rc == 0 and out.splitlines()[1].startswith("micro-step (a sync every 4; the times are per micro-step)")


def test_cli_says_one_recorded_rank_adds_no_waiting(capsys):
    """One rank shows no rank-to-rank spread (learn.extract._jitter: 0): at 8 ranks `simulate` said
    nothing of the waiting it left out. On GPU nodes it takes their profile's (learn.hardware.profile_spread)."""
    from ddpsim.samples import BUNDLED_DIR

    one = str(BUNDLED_DIR / "11_h200_resnet50_nccl_1rank.json")
    rc, out, _ = run_cli(["simulate", "--trace", one, "--world-size", "8", "--bandwidth-gbps", "100"], capsys)
    assert rc == 0 and "waiting for stragglers: not included (one recorded rank" in out, out
    rc, out, _ = run_cli(["simulate", "--trace", one, "--world-size", "8", "--hardware", "h100-nvlink"], capsys)
    assert rc == 0 and "waiting for stragglers: 0." in out and "every rank waits for the slowest of 8" in out, out
    rc, out, _ = run_cli(["simulate", "--trace", one, "--world-size", "8", "--hardware", "h100-nvlink",
                          "--jitter", "0.05"], capsys)
    assert rc == 0 and "waiting for stragglers: " in out and "not included" not in out, out


def test_cli_says_what_it_plays_and_adds_up_as_scaling_does(capsys):
    """At another world size `simulate` drew each rank's speed without saying it was not the replay (the
    What-if page and `scaling` say so); its "exposed comm" counted the wait for the slowest rank that
    `scaling` splits off (3.2 ms against scaling's 0.2 ms exposed + 1.7 ms waiting, unexplained); and
    --hardware over a gloo recording switched to NCCL's collectives without a word."""
    from ddpsim.samples import BUNDLED_DIR

    mlp = str(BUNDLED_DIR / "01_mlp_torch_default.json")
    at = ["simulate", "--trace", mlp, "--world-size", "8", "--hardware", "v100-eth25"]
    rc, out, _ = run_cli(at, capsys)
    assert rc == 0 and "Not the recorded iterations replayed: the recording ran 2 ranks, so at 8" in out, out
    assert "network: NCCL on V100-SXM2 nodes" in out and "in place of the recording's gloo" in out
    rc, table, _ = run_cli(["scaling", *at[1:3], "--world-sizes", "8", "--hardware", "v100-eth25"], capsys)
    row = json.loads(table.splitlines()[-1])["rows"][0]
    assert rc == 0 and f"of the {row['iteration_time_s'] * 1e3:.3f} ms" in out
    assert f"waiting for stragglers: {row['waiting_s'] * 1e3:.3f} ms" in out
    assert f"without the spread, exposed comm is {row['exposed_comm_s'] * 1e3:.3f} ms" in out, out
    rc, out, _ = run_cli(["simulate", "--trace", mlp], capsys)  # the recorded ranks replayed: nothing to say
    assert rc == 0 and "Not the recorded" not in out and "network:" not in out
    h100 = str(BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json")  # its ranks ran 0.90x and 1.10x: the page's caution
    rc, out, _ = run_cli(["simulate", "--trace", h100, "--world-size", "8", "--hardware", "h100-eth25"], capsys)
    assert rc == 0 and "The recorded ranks did not run equally fast (rank 0 0.90x, rank 1 1.10x" in out, out


def test_cli_subprocess_end_to_end(recorded, tmp_path):
    path, _, _ = recorded
    p = subprocess.run([sys.executable, "-m", "ddpsim", "simulate", "--trace", str(path),
                        "--out", str(tmp_path / "s.json")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "iteration_time_s" in json.loads(p.stdout.strip().splitlines()[-1])
    p = subprocess.run([sys.executable, "-m", "ddpsim", "simulate", "--trace", str(path),
                        "--world-size", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1


def test_validate_self_prediction_is_exact_for_a_simulated_run(recorded):
    from ddpsim.experiments.validate import validate

    _, trace, _ = recorded
    trace.meta["link"] = {"concurrency": 1}
    res = validate(trace, iters=5, jitter=0.0)
    for m in ("iteration_time_s", "exposed_comm_s"):
        assert abs(res["metrics"][m]["rel_error"]) < 1e-4


@pytest.mark.slow  # spawns real gloo ranks
def test_calibrate_fits_local_gloo():
    from ddpsim.experiments.calibrate import calibrate

    cal = calibrate([4096, 1 << 20], reps=2, timeout=90)
    assert cal["alpha_s"] >= 0 and cal["bandwidth_Bps"] > 0 and len(cal["points"]) == 2
    # CPU time too (Note [Not all of an allreduce is core work]), at most the wall time's fit
    assert len(cal["cpu_points"]) == 2 and cal["cpu_s_per_byte"] >= 0 and cal["cpu_intercept_s"] >= 0
    # the scheduler's time slice (Note [Ranks take turns on a shared core]): real, and well
    # under the 100 ms a 2-process spin would see only if the kernel never preempted
    assert 0.0 < cal["time_slice_s"] < 0.1


def test_one_launch_size_is_charged_per_launch():
    from ddpsim.learn.linkfit import launch_line

    assert launch_line([(4 * MIB, 500_000.0), (4 * MIB, 540_000.0), (4 * MIB, 600_000.0)]) == (540_000.0, 0.0)
    a, b = launch_line([(MIB, 300_000.0), (3 * MIB, 500_000.0)])  # two sizes: the line through them
    assert a == pytest.approx(200_000.0) and b == pytest.approx(100_000.0 / MIB)


def test_lower_quartile_drops_the_polling():
    from ddpsim.record.probe import lower_quartile

    assert lower_quartile([1.0, 1.1, 3.7, 1.2, 3.6, 1.0, 3.9, 1.1]) == pytest.approx(1.0)
    assert lower_quartile([5.0]) == 5.0


def test_launch_cost_and_rank_speeds_are_learnt():
    from ddpsim.learn.extract import measured_backward_scale

    w = workload()
    w.link = w.link.with_(shared_core=True)  # the CPU gloo path
    w.launch_s, w.launch_s_per_byte = 0.0005, 0.0001 / MIB  # per launch, per byte
    trace, s = simulate(w, SimConfig(world_size=2, bucket_cap_mb=2, iters=5, backward_scale={1: 1.5}))
    assert all(b.launch_end_ns > b.launch_ns for b in trace.ranks[0].iterations[2].buckets)
    d = trace.to_dict()
    d["source"] = "simulated"
    learnt = workload_from_trace(from_dict(d))
    assert (learnt.launch_s, learnt.launch_s_per_byte) == pytest.approx((0.0005, 0.0001 / MIB), rel=1e-6)
    f = learnt.meta["rank_factors"]
    assert f[1] / f[0] == pytest.approx(1.5)
    # launches taken out; each gradient at the median of the two ranks' speeds (1 and 1.5)
    assert learnt.grad_compute_s == pytest.approx([0.004 * 1.25, 0.003 * 1.25, 0.002 * 1.25, 0.001 * 1.25])
    assert measured_backward_scale(learnt, 2) == f
    assert measured_backward_scale(learnt, 4) == {}  # no rank to map them to


def _iteration(i: int, compute_ns: int):
    from types import SimpleNamespace

    return SimpleNamespace(iteration=i, forward_compute_ns=compute_ns // 4,
                           backward=SimpleNamespace(start_ns=0), backward_compute_end_ns=compute_ns - compute_ns // 4)


def test_jitter_is_rank_to_rank_noise_not_slow_spells():
    """Note [Only rank-to-rank noise makes ranks wait]."""
    from ddpsim.learn.extract import _jitter

    spells = [1000, 1600, 800, 1300, 1000, 2000]  # ns: the whole machine's speed, iteration by iteration
    same = [_iteration(i, c) for i, c in enumerate(spells) for _rank in range(2)]
    assert _jitter(same) == 0.0  # both ranks slow together: nobody waits
    apart = [_iteration(i, c + d) for i, c in enumerate(spells) for d in (-100, 100)]
    assert _jitter(apart) == pytest.approx(2 ** 0.5 * 100 / 1283.33, rel=1e-3)  # sample sd of (c-100, c+100)
    alone = [_iteration(i, c) for i, c in enumerate(spells)]  # one rank: slow spells, no rank to wait for
    assert _jitter(alone) == 0.0
    trace, _ = simulate(workload(), SimConfig(world_size=4, bucket_cap_mb=2, iters=40, jitter=0.2))
    d = trace.to_dict()
    d["source"] = "real"
    d["meta"]["options"] = {"bucket_cap_mb": 2, "find_unused_parameters": False}
    assert 0.14 < workload_from_trace(from_dict(d)).meta["jitter_estimated"] < 0.22  # the simulator's own noise


def test_the_rank_spread_of_a_short_no_sync_run_is_measured():
    """A convnet recording (the bundled sample until 2026-11-27; no_sync every 3, 6 iterations) has one
    steady synced step, so its clean iterations were 2 and the spread came out 0: at 4 ranks nobody
    waited, and the What-if page predicted less exposed communication than at the 2 recorded ranks
    (0.45 against 1.7 ms). The spread now comes from all its steady iterations when the clean ones are
    too few."""
    from ddpsim.learn import replay_config
    from ddpsim.trace import load_trace

    trace = load_trace(Path(__file__).parent / "fixtures" / "before" / "convnet_no_sync3_2026-11-26.json")
    w = workload_from_trace(trace)
    assert w.meta["jitter_estimated"] > 0
    _, two = simulate(w, replay_config(w, trace))
    _, four = simulate(w, replay_config(w, trace, world_size=4))
    assert four["exposed_comm_s"] >= two["exposed_comm_s"]


def test_one_bucket_size_takes_its_latency_from_the_recordings_probe():
    """Note [One bucket size and the latency probe]: the convnet sample's collectives all have one
    size; off a shared core its line goes through the probe's 4 KiB allreduce, not the origin."""
    from ddpsim import load_trace
    from ddpsim.samples import sample_path

    trace = load_trace(sample_path("05_convnet_torch_no_sync3"))
    latency = trace.meta["hook_rates"]["allreduce_latency_s"]
    ring = workload_from_trace(trace, shared_core=False).link
    assert ring.allreduce_s(4096, 2) == pytest.approx(latency, rel=1e-3)
    assert ring.allreduce_s(1 << 20, 2) > latency
    trace.meta["hook_rates"]["allreduce_latency_s"] = 1.0  # a probe slower than the bucket: no flat line
    assert workload_from_trace(trace, shared_core=False).link.alpha_s == 0.0
    del trace.meta["hook_rates"]  # an older recording: a line through the origin, as before
    assert workload_from_trace(trace, shared_core=False).link.alpha_s == 0.0
    assert workload_from_trace(load_trace(sample_path("05_convnet_torch_no_sync3"))).link.alpha_s == 0.0  # shared core
