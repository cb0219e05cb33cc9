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


def test_a_prediction_without_drawn_noise_simulates_fewer_steps_and_the_same_numbers():
    """learn.extract STEADY_ITERS: where nothing is drawn (no rank-to-rank spread, or the expected slowest
    rank) the steps after the rebuild and PowerSGD's set-up repeat exactly, so 6 give what 20 give; with a
    drawn spread, ranks taking turns on shared cores or PowerSGD starting beyond the 6, 20 steps."""
    from dataclasses import replace

    from ddpsim.learn.extract import DRAWN_ITERS, STEADY_ITERS

    gpu = load_trace(sample_path("11_h200_resnet50_nccl_1rank.json"))  # one rank: its GPU profile's spread,
    w = workload_from_trace(gpu)  # played as the expected slowest rank (sim/stragglers.py), not drawn
    for change in ({}, {"bucket_cap_mb": 1.0, "order": "random"}, {"comm_hook": "powersgd", "powersgd_start_iter": 2},
                   {"no_sync_every": 3, "find_unused_parameters": True}, {"jitter": 0.0}):
        cfg = replay_config(w, gpu, world_size=64, **change)
        assert cfg.iters == STEADY_ITERS and cfg.jitter in (0.0, 0.004), change
        assert cfg.jitter_mode == ("sampled" if "jitter" in change else "expected"), change
        few, many = simulate(w, cfg)[1], simulate(w, replace(cfg, iters=DRAWN_ITERS))[1]
        for m in ("iteration_time_s", "exposed_comm_s", "overlap_fraction"):
            assert abs(few[m] - many[m]) <= 1e-5 * max(abs(many[m]), 1e-9), (change, m, few[m], many[m])
    late = replay_config(w, gpu, world_size=64, comm_hook="powersgd", powersgd_start_iter=10)
    assert late.iters == DRAWN_ITERS  # PowerSGD compresses from step 10: 6 steps would never reach it
    few = simulate(w, replace(late, iters=STEADY_ITERS))[1]
    assert simulate(w, late)[1]["iteration_time_s"] != few["iteration_time_s"]
    mlp = load_trace(sample_path("01_mlp_torch_default.json"))  # two CPU ranks: a measured spread
    w = workload_from_trace(mlp)
    cfg = replay_config(w, mlp, world_size=4)
    assert cfg.jitter > 0 and cfg.iters == DRAWN_ITERS
