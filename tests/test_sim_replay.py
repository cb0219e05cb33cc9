"""Note [Replay the recorded layouts]: replaying a recording with its own options uses its layouts."""
import copy

from ddpsim.samples import sample_path
from ddpsim.learn import simulate
from ddpsim.learn.extract import replay_config, workload_from_trace
from ddpsim.trace import load_trace


def sim_layouts(trace):
    return [(lay.kind, [b.params for b in lay.buckets]) for lay in trace.ranks[0].layouts]


def test_replay_takes_the_recorded_layouts_even_where_computing_would_differ():
    real = load_trace(sample_path("01_mlp_torch_default.json"))
    tampered = copy.deepcopy(real)  # a layout the bucket assignment would never compute
    rebuilt = tampered.ranks[0].layouts[-1]
    rebuilt.buckets[0].params, rebuilt.buckets[1].params = [9, 8], [7, 6, 5, 4, 3, 2, 1, 0]
    w = workload_from_trace(tampered)
    sim, _ = simulate(w, replay_config(w, tampered, iters=3))
    assert sim.meta["layouts_from"] == "recording"
    assert sim_layouts(sim) == [("construction", [list(range(10))]),
                                ("rebuilt", [[9, 8], [7, 6, 5, 4, 3, 2, 1, 0]])]


def test_a_layout_what_if_computes_layouts():
    real = load_trace(sample_path("01_mlp_torch_default.json"))
    w = workload_from_trace(real)
    sim, _ = simulate(w, replay_config(w, real, iters=3))
    assert sim.meta["layouts_from"] == "recording"
    assert sim_layouts(sim) == [(lay.kind, [b.params for b in lay.buckets]) for lay in real.ranks[0].layouts]
    for what_if in ({"bucket_cap_mb": 0.25}, {"order": "definition"}, {"find_unused_parameters": True},
                    {"overlap": True}):
        sim, _ = simulate(w, replay_config(w, real, iters=3, **what_if))
        assert sim.meta["layouts_from"] == "computed", what_if
