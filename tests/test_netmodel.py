"""The network learnt per world size (``ddpsim.sim.netmodel``, ``calibrate --world-sizes``)."""
import json

import pytest

from ddpsim.experiments.calibrate import combine, fit_calibration
from ddpsim.sim import netmodel
from ddpsim.sim.network import Link

MIB = 1 << 20


def _line(alpha, beta, k, cpus, gamma):
    return netmodel.line_at({"alpha_s": alpha, "beta_s_per_byte": beta, "gamma": gamma, "cpus": cpus}, k)


@pytest.mark.parametrize("gamma", [1.0, 0.7, 0.0])
def test_fit_recovers_a_known_ring_with_core_sharing(gamma):
    alpha, beta = 50e-6, 1e-9  # s per ring step, s per ring byte
    lines = {k: _line(alpha, beta, k, 2, gamma) for k in (2, 4, 8)}
    fit = netmodel.fit_world_sizes(lines, cpus=2)
    assert fit["gamma"] == pytest.approx(gamma)
    assert fit["alpha_s"] == pytest.approx(alpha) and fit["beta_s_per_byte"] == pytest.approx(beta)
    # extrapolates to a world size it never saw, exactly
    assert netmodel.line_at(fit, 16) == pytest.approx(_line(alpha, beta, 16, 2, gamma))
    assert netmodel.line_at(fit, 3) == pytest.approx(_line(alpha, beta, 3, 2, gamma))


def test_fit_without_sharing_is_the_plain_ring():
    # every rank on its own core: alpha-beta with ring step counts 2(k-1) and 2(k-1)/k
    link = Link(alpha_s=20e-6, bandwidth_Bps=2e9)
    lines = {k: (link.allreduce_s(0, k), (link.allreduce_s(MIB, k) - link.allreduce_s(0, k)) / MIB)
             for k in (2, 3, 5)}
    fit = netmodel.fit_world_sizes(lines, cpus=16)
    assert fit["gamma"] == 1.0  # nothing measured above 16 ranks: the default
    for k in (2, 7, 12):
        a, b = netmodel.line_at(fit, k)
        assert a + b * MIB == pytest.approx(link.allreduce_s(MIB, k))
    with pytest.raises(ValueError, match="world size >= 2"):
        netmodel.fit_world_sizes({1: (0.0, 1e-9)}, cpus=2)


def _entry(k, a, b, ca=1e-4, cb=5e-10, cpus=2):
    rows = [(n, a + b * n, ca + cb * n) for n in (4096, MIB, 8 * MIB)]
    e = fit_calibration(rows, k, turn=0.004)
    e["host_cpus"] = cpus
    return e


def test_calibration_stores_every_world_size_and_looks_up_the_target():
    cal = combine({2: _entry(2, 2e-3, 1e-9), 4: _entry(4, 6e-3, 2e-9)}, turn=0.004)
    json.dumps(cal)  # stored in a trace's meta / --save: plain JSON
    assert sorted(cal["world_sizes"]) == ["2", "4"]
    # the old single-world-size keys stay: the smallest world size's
    assert cal["world_size"] == 2 and cal["intercept_s"] == pytest.approx(2e-3)
    (a, b), cpu, where = netmodel.lines_at(cal, 4)  # measured: its own line
    assert (a, b) == pytest.approx((6e-3, 2e-9)) and cpu == pytest.approx((1e-4, 5e-10))
    assert where == "measured at k=4"
    (a8, b8), cpu8, where8 = netmodel.lines_at(cal, 8)  # not measured: the fit
    assert where8.startswith("fitted") and cpu8 is not None
    assert (a8, b8) == pytest.approx(netmodel.line_at(cal["fit"]["wall"], 8))
    assert a8 > 6e-3 and b8 > 2e-9


def test_old_single_world_size_calibration_still_reads():
    old = _entry(2, 2e-3, 1e-9)  # what `calibrate` stored before --world-sizes
    assert netmodel.measured_lines(old) == {2: old}
    assert netmodel.covers(old, 2) and not netmodel.covers(old, 4)
    with pytest.raises(ValueError, match="no line at world size 4"):
        netmodel.lines_at(old, 4)


def test_target_link_shares_cores_beyond_the_host_cpus():
    cal = combine({2: _entry(2, 2e-3, 1e-9), 4: _entry(4, 6e-3, 2e-9)}, turn=0.004)
    two, four, eight = (netmodel.link_at(cal, k) for k in (2, 4, 8))
    assert (two.cpus, two.time_slice_s) == (0, 0.0)  # a core each
    assert (four.cpus, four.time_slice_s) == (2, 0.004)  # the host's cores, the measured slice
    assert eight.cpus == 2 and eight.shared_core
    assert four.allreduce_s(MIB, 4) == pytest.approx(6e-3 + 2e-9 * MIB)  # the measured line, exactly
    big = combine({2: _entry(2, 2e-3, 1e-9, cpus=16)})
    assert netmodel.link_at(big, 8).cpus == 0  # 8 ranks on 16 cores: no sharing


def test_simulating_another_world_size_uses_the_target_network():
    from ddpsim.sim import ParamSpec, SimConfig, Workload
    from ddpsim.sim.plan import resolve_link

    cal = combine({2: _entry(2, 2e-3, 1e-9), 4: _entry(4, 6e-3, 2e-9)}, turn=0.004)
    learnt = netmodel.link_at(cal, 2)
    w = Workload("w", [ParamSpec(0, "p", 4 * MIB)], [0], [1e-3], learnt,
                 meta={"recorded_world_size": 2, "calibration": cal})
    assert resolve_link(w, SimConfig(world_size=2)) == learnt  # the learnt link at its own world size
    four = resolve_link(w, SimConfig(world_size=4))
    assert four.cpus == 2 and four.allreduce_s(MIB, 4) == pytest.approx(6e-3 + 2e-9 * MIB)
    w.meta["calibration"] = _entry(2, 2e-3, 1e-9)  # an old calibration: the learnt link, as before
    assert resolve_link(w, SimConfig(world_size=4)) == learnt


def test_a_recorded_workload_simulates_another_world_size_on_the_calibrated_network():
    from ddpsim.learn.extract import workload_from_trace
    from ddpsim.samples import sample_path
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.trace import load_trace

    trace = load_trace(sample_path("01_mlp_torch_default"))
    assert trace.world_size == 2 and trace.meta["backend"] == "gloo"
    trace.meta["calibration"] = combine({2: _entry(2, 2e-3, 1e-9), 4: _entry(4, 6e-3, 2e-9)}, turn=0.004)
    w = workload_from_trace(trace)
    _, at2 = simulate(w, SimConfig(world_size=2, iters=3))
    _, at4 = simulate(w, SimConfig(world_size=4, iters=3))
    _, at8 = simulate(w, SimConfig(world_size=8, iters=3))
    assert at2["link"]["cpus"] == 0 and at4["link"]["cpus"] == 2 and at4["link"]["time_slice_s"] == 0.004
    assert "measured at k=4" in at4["link"]["name"] and "fitted" in at8["link"]["name"]
    # two ranks per core, then four: each step slower
    assert at2["iteration_time_s"] < at4["iteration_time_s"] < at8["iteration_time_s"]


def test_ranks_sharing_cores_beyond_the_explicit_limit_are_refused_in_one_line():
    # Ranks that share cores are played one by one (Note [Ranks that share a CPU]); grouped, they
    # would each get a core of their own: 64 ranks on 2 cores took 1.2 s, 128 "took" 0.27 s.
    from ddpsim.learn.extract import workload_from_trace
    from ddpsim.samples import sample_path
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.trace import load_trace

    trace = load_trace(sample_path("01_mlp_torch_default"))
    trace.meta["calibration"] = combine({2: _entry(2, 2e-3, 1e-9), 4: _entry(4, 6e-3, 2e-9)}, turn=0.004)
    w = workload_from_trace(trace)
    _, at8 = simulate(w, SimConfig(world_size=8, iters=2, max_explicit_ranks=8))
    assert at8["link"]["cpus"] == 2 and at8["actors"] == 8
    for k in (9, 100_000):
        with pytest.raises(ValueError, match=f"^{k} ranks sharing 2 CPU cores: .*at most 8;") as e:
            simulate(w, SimConfig(world_size=k, iters=2, max_explicit_ranks=8))
        assert "\n" not in str(e.value)


def test_anchor_moves_every_world_size_by_the_recordings_own_line():
    # Note [Anchor the network to the recording]: calibrate measured 2 and 4 ranks in a slow
    # spell (slopes 1.5x); the recording's ranks timed 2 ranks at the normal speed. The cost
    # doubles from 2 to 4 ranks at every size, so the 4-rank line is twice the recording's.
    from ddpsim.experiments.anchoring import anchor

    cal = combine({2: _entry(2, 2e-3, 1.5e-9, cb=6e-10), 4: _entry(4, 4e-3, 3e-9, ca=2e-4, cb=12e-10)}, turn=0.004)
    own = _entry(2, 2e-3, 1e-9, cb=4e-10)
    out = anchor(cal, own, 2)
    (a2, b2), (ca2, cb2), _ = netmodel.lines_at(out, 2)
    assert (a2, b2, ca2, cb2) == pytest.approx((2e-3, 1e-9, 1e-4, 4e-10))
    (a4, b4), (ca4, cb4), _ = netmodel.lines_at(out, 4)
    assert (a4, b4, ca4, cb4) == pytest.approx((4e-3, 2e-9, 2e-4, 8e-10))  # same growth, the recording's level
    assert netmodel.line_at(out["fit"]["wall"], 8) == pytest.approx(
        tuple(x * r for x, r in zip(netmodel.line_at(cal["fit"]["wall"], 8), (1.0, 2 / 3))))
    assert out["time_slice_s"] == 0.004 and out["anchored"]["s_per_byte"] == pytest.approx(2 / 3, abs=1e-4)
    # anchored at a world size calibrate did not measure: its fit's line there is the reference
    at3 = anchor(cal, {**own, "s_per_byte": 2 * netmodel.lines_at(cal, 3)[0][1]}, 3)
    assert at3["anchored"]["s_per_byte"] == pytest.approx(2.0, abs=1e-4)
    with pytest.raises(ValueError, match="the recording's line has no cpu_intercept_s"):
        anchor(cal, {"intercept_s": 2e-3, "s_per_byte": 1e-9}, 2)


def test_anchor_takes_the_growth_size_by_size_not_parameter_by_parameter():
    # Note [Anchor each message size]: gloo's CPU time is convex in the size, and a line
    # through it can have an intercept near 0 (here 2 us at 2 ranks, 0.3 ms measured at 4 KiB).
    # Intercept over intercept would charge every 4-rank allreduce 0.4 ms x (0.18 ms / 2 us),
    # 37 ms of CPU; size by size the growth is 1.3x to 2.2x, and so is the anchored line's.
    from ddpsim.experiments.anchoring import anchor

    sizes = [4096, 65536, 262144, MIB, 4 * MIB, 8 * MIB]
    cpu2 = [0.29e-3, 0.27e-3, 0.31e-3, 0.55e-3, 2.06e-3, 5.25e-3]  # 2026-11-25 07:17, shuffled
    cpu4 = [1.2 * c + 0.3e-3 for c in cpu2]
    own_cpu = [0.45e-3, 0.40e-3] + [0.9 * c for c in cpu2[2:]]

    def entry(k, cpu):
        e = fit_calibration([(n, 2e-3 + 1e-9 * n, c) for n, c in zip(sizes, cpu)], k, turn=0.004)
        return {**e, "host_cpus": 2}

    cal = combine({2: {**entry(2, cpu2), "cpu_intercept_s": 2e-6}, 4: entry(4, cpu4)}, turn=0.004)
    own = entry(2, own_cpu)
    _, (ca4, cb4), _ = netmodel.lines_at(anchor(cal, own, 2), 4)
    assert 0 < ca4 < 1e-3  # parameter by parameter: 37 ms
    assert ca4 + cb4 * 8 * MIB == pytest.approx(own_cpu[-1] * cpu4[-1] / cpu2[-1], rel=0.1)
