"""The Compare page climbs the ladder (naive -> overlap -> bucketed -> torch) for the picked runs."""
from pathlib import Path

from streamlit.testing.v1 import AppTest

from ddpsim.experiments.ladder import RUNGS, rung_of
from ddpsim.samples import sample_path
from ddpsim.learn import simulate
from ddpsim.learn.extract import replay_config, workload_from_trace
from ddpsim.trace import load_trace

APP = str(Path(__file__).resolve().parents[1] / "app.py")


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
    at = AppTest.from_file(APP, default_timeout=90)
    at.session_state["ddpsim_uploads"] = sims
    at.session_state["ddpsim_trace_ids"] = {k: i for i, k in enumerate(sims)}
    at.session_state["ddpsim_trace_counter"] = len(sims)
    at.run()
    at.switch_page("ddpsim/app/pages/compare.py").run()
    at.multiselect(key="ddpsim_compare_runs").set_value(list(sims)).run()
    assert not at.exception, [e.message for e in at.exception]
    assert len(at.image) == 2  # the runs on one time axis, and the ladder
    at.multiselect(key="ddpsim_compare_runs").set_value(["sim_torch", "01_mlp_torch_default"]).run()
    assert len(at.image) == 1 and any("two rungs" in i.value for i in at.info)
