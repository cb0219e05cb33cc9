"""A what-if without collectives (noop) runs the backward alone, as the recording measured it
(learn/alone.py Note [A run without collectives computes alone]); every other what-if is unchanged."""
import dataclasses
import json
import statistics
from pathlib import Path

import pytest

from ddpsim import load_trace
from ddpsim.learn import learn, replay_config, simulate, workload_from_trace
from ddpsim.learn.alone import KEY, simulated_ns
from ddpsim.learn.refine import measure_alone, refine

# a 2-rank CPU recording made before the recorder measured backward_cpu_ns (2026-11-21)
SAMPLE = Path(__file__).resolve().parent / "fixtures" / "before" / "mlp_2026-11-21.json"
ALONE = {0: 0.8, 1: 0.6}  # each rank's backward alone, as a share of its recorded backward


def with_cpu_times(tmp_path, ranks=(0, 1), **meta):
    """The bundled 2-rank CPU recording with ``backward_cpu_ns`` on every iteration of ``ranks``."""
    d = json.loads(SAMPLE.read_text())
    d["meta"].update(meta)
    for r in d["ranks"]:
        if r["rank"] not in ranks:
            continue
        for it in r["iterations"]:
            it["backward_cpu_ns"] = int(ALONE[r["rank"]] * (it["backward"]["end_ns"] - it["backward"]["start_ns"]))
    path = tmp_path / "cpu.json"
    path.write_text(json.dumps(d))
    return load_trace(path)


def measured_ms(trace, w) -> dict[int, float]:
    steady = set(w.meta["steady_iterations"])
    return {r.rank: statistics.median(it.backward_cpu_ns for it in r.iterations
                                      if it.iteration in steady and it.sync) / 1e6 for r in trace.ranks}


def test_noop_runs_the_measured_backward_less_the_division(tmp_path):
    trace = with_cpu_times(tmp_path)
    w = learn(trace)
    assert set(w.meta[KEY]) == {"0", "1"}
    got = simulated_ns(simulate(w, replay_config(w, trace, comm_hook="noop"))[0])
    for rank, ms in measured_ms(trace, w).items():
        assert got[rank] / 1e6 == pytest.approx(ms - w.launch_s_per_byte * 12_617_768 * 1e3, rel=0.03)
    # a division the plain run paid and noop does not: 1e-10 s/byte over the 12,617,768 gradient bytes
    assert sum(p.bytes for p in w.params) == 12_617_768
    dear = measure_alone(dataclasses.replace(refine(workload_from_trace(trace), trace), launch_s_per_byte=1e-10),
                         trace)
    got = simulated_ns(simulate(dear, replay_config(dear, trace, comm_hook="noop"))[0])
    for rank, ms in measured_ms(trace, dear).items():
        assert got[rank] / 1e6 == pytest.approx(ms - 1.2617768, rel=0.03), (rank, got, ms)


def test_only_noop_at_the_recorded_ranks_changes(tmp_path):
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
    # drawn rank noise or another world size: not the recorded ranks the factors were fitted on
    for fields in ({"world_size": 4}, {"jitter": 0.0}):
        assert (replay_config(w1, measured, comm_hook="noop", **fields).synced_backward_scale
                == replay_config(w0, plain, comm_hook="noop", **fields).synced_backward_scale), fields


@pytest.mark.parametrize("why", ["a rank without it", "a hooked recording", "a GPU recording"])
def test_no_backward_alone_leaves_the_workload_alone(tmp_path, why):
    if why == "a rank without it":
        trace = with_cpu_times(tmp_path, ranks=(0,))
    elif why == "a hooked recording":  # its CPU time holds the hook's casts too
        trace = with_cpu_times(tmp_path, options={**json.loads(SAMPLE.read_text())["meta"]["options"],
                                                  "comm_hook": "fp16"})
    else:
        trace = with_cpu_times(tmp_path, placement={"device": "cuda"})
    assert KEY not in learn(trace).meta
