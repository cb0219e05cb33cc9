"""The Compare page climbs the ladder (naive -> overlap -> bucketed -> torch) for the picked runs."""
from apputil import compare_page

from ddpsim.experiments.ladder import RUNGS, rung_of
from ddpsim.samples import sample_path
from ddpsim.learn import simulate
from ddpsim.learn.extract import replay_config, workload_from_trace
from ddpsim.trace import load_trace


def simulated_rungs():
    real = load_trace(sample_path("01_mlp_torch_default.json"))
    w = workload_from_trace(real)
    out = {}
    for rung in RUNGS:
        out[f"sim_{rung.name}"], _ = simulate(w, replay_config(w, real, iters=4, **rung.simulate))
    return real, out


def test_rung_of_real_and_simulated_traces():
    real, sims = simulated_rungs()
    assert rung_of(real) == "torch"
    assert {k: rung_of(t) for k, t in sims.items()} == {f"sim_{r.name}": r.name for r in RUNGS}


def test_compare_page_shows_the_ladder_of_the_picked_runs():
    _, sims = simulated_rungs()
    at = compare_page(sims)
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.image) == 2  # the runs on one time axis, and the ladder
    at.multiselect(key="ddpsim_compare_runs").set_value(["sim_torch", "01_mlp_torch_default"]).run()
    assert len(at.image) == 1 and any("two rungs" in i.value for i in at.info)
