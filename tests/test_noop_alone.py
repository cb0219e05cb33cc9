"""A what-if without collectives (noop) computes the backward alone, as the recording measured it
(learn/alone.py Note [A run without collectives computes alone]); every other what-if is unchanged."""
import json
import statistics
from pathlib import Path

import pytest

from ddpsim import load_trace
from ddpsim.learn import learn, replay_config, simulate
from ddpsim.learn.alone import KEY, simulated_ns

SAMPLE = Path(__file__).resolve().parents[1] / "ddpsim" / "samples" / "01_mlp_torch_default.json"
ALONE = {0: 0.8, 1: 0.6}  # each rank's compute alone, as a share of its recorded backward


def with_cpu_times(tmp_path, ranks=(0, 1)):
    """The bundled 2-rank CPU recording with ``backward_cpu_ns`` on the synced iterations of ``ranks``."""
    d = json.loads(SAMPLE.read_text())
    for r in d["ranks"]:
        if r["rank"] not in ranks:
            continue
        for it in r["iterations"]:
            it["backward_cpu_ns"] = int(ALONE[r["rank"]] * (it["backward"]["end_ns"] - it["backward"]["start_ns"]))
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(d))
    return load_trace(path)


def test_noop_runs_the_measured_compute_alone(tmp_path):
    trace = with_cpu_times(tmp_path)
    w = learn(trace)
    assert set(w.meta[KEY]) == {"0", "1"}
    sim, _ = simulate(w, replay_config(w, trace, comm_hook="noop"))
    got = simulated_ns(sim)
    steady = set(w.meta["steady_iterations"])
    division = w.launch_s_per_byte * sum(p.bytes for p in w.params) * 1e9  # the plain run's, not noop's
    for r in trace.ranks:
        cpu = statistics.median(it.backward_cpu_ns for it in r.iterations if it.iteration in steady and it.sync)
        assert got[r.rank] == pytest.approx(cpu - division, rel=0.03), (r.rank, got, cpu, division)


def test_only_noop_changes(tmp_path):
    plain, measured = load_trace(SAMPLE), with_cpu_times(tmp_path)
    w0, w1 = learn(plain), learn(measured)
    assert KEY not in w0.meta
    for hook in (None, "fp16", "round-robin:2"):
        a = simulate(w0, replay_config(w0, plain, comm_hook=hook))[1]["iteration_time_s"]
        b = simulate(w1, replay_config(w1, measured, comm_hook=hook))[1]["iteration_time_s"]
        assert a == b, hook
    a = simulate(w0, replay_config(w0, plain, comm_hook="noop"))[1]["iteration_time_s"]
    b = simulate(w1, replay_config(w1, measured, comm_hook="noop"))[1]["iteration_time_s"]
    assert b != a
    # another world size keeps the learnt split: the measurement is of the recorded ranks
    cfg = replay_config(w1, measured, comm_hook="noop", world_size=4)
    assert cfg.backward_scale != replay_config(w1, measured, comm_hook="noop").backward_scale


def test_a_rank_without_the_measurement_leaves_the_workload_alone(tmp_path):
    trace = with_cpu_times(tmp_path, ranks=(0,))
    assert KEY not in learn(trace).meta
