"""ddpsim.learn.sweep on a recorded trace: a dict base changes the replay of the run (its options and
recorded ranks), a SimConfig base is a whole configuration (as ddpsim.learn.simulate takes one), and
any other base is refused in one line."""
import pytest

from ddpsim.learn import learn, replay_config, simulate, sweep
from ddpsim.samples import sample_path
from ddpsim.sim import SimConfig
from ddpsim.trace import load_trace

CAPS = [0.25, 25]


@pytest.fixture(scope="module")
def run():
    return load_trace(sample_path("01_mlp_torch_default.json"))


def times(rows) -> dict:
    return {r["bucket_cap_mb"]: r["iteration_time_s"] for r in rows}


def test_a_simconfig_base_is_taken_whole_as_simulate_takes_it(run):
    """It crashed: TypeError: 'SimConfig' object is not iterable (learn/__init__.py, dict(base))."""
    base = SimConfig(world_size=2, iters=3)
    rows = sweep(run, {"bucket_cap_mb": CAPS}, base)
    w = learn(run)
    want = {c: simulate(w, SimConfig(world_size=2, iters=3, bucket_cap_mb=c))[1]["iteration_time_s"] for c in CAPS}
    assert times(rows) == want


def test_a_dict_base_changes_the_replay_of_the_run(run):
    rows = sweep(run, {"bucket_cap_mb": CAPS}, {"iters": 3})
    w = learn(run)
    want = {c: simulate(w, replay_config(w, run, iters=3, bucket_cap_mb=c))[1]["iteration_time_s"] for c in CAPS}
    assert times(rows) == want


def test_a_workload_takes_a_dict_base_too(run):
    w = learn(run)
    rows = sweep(w, {"bucket_cap_mb": CAPS}, {"world_size": 2, "iters": 3})
    assert times(rows) == times(sweep(w, {"bucket_cap_mb": CAPS}, SimConfig(world_size=2, iters=3)))


def test_another_base_is_refused_in_one_line(run):
    with pytest.raises(TypeError, match="^base must be a SimConfig or a dict of SimConfig fields, not list$"):
        sweep(run, {"bucket_cap_mb": CAPS}, [("iters", 3)])
