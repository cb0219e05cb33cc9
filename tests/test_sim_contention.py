"""The shared-core (processor-sharing) model of CPU gloo: hand-computed timelines."""
import pytest
import simpy

from ddpsim.learn import learn, replay_config, simulate, workload_from_trace
from ddpsim.learn.contention import shared_work as _shared_work
from ddpsim.samples import BUNDLED_DIR
from ddpsim.sim import Link, ParamSpec, SimConfig, Workload
from ddpsim.sim import simulate as simulate_workload
from ddpsim.sim.core import Core
from ddpsim.trace import load_trace

MIB = 1024 * 1024


def test_core_shares_equally():
    # works 1, 2, 3 s started together: all at 1/3 until the first ends at 3 s; the
    # other two at 1/2 (1 and 2 s left) -> the second at 5 s; the last alone -> 6 s.
    env = simpy.Environment()
    core = Core(env)
    ends = {}

    def job(name, work, start=0.0):
        yield env.timeout(start)
        yield core.run(work)
        ends[name] = env.now

    for name, work in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
        env.process(job(name, work))
    env.run()
    assert ends == pytest.approx({"a": 3.0, "b": 5.0, "c": 6.0})


def test_core_job_arriving_later_and_zero_work():
    # a: 2 s alone from 0; b (1 s) arrives at 1: both at 1/2 -> a has 1 left at 1,
    # b and a both finish at 3 s. A zero-work job finishes at once.
    env = simpy.Environment()
    core = Core(env)
    ends = {}

    def job(name, work, start):
        yield env.timeout(start)
        yield core.run(work)
        ends[name] = env.now

    env.process(job("a", 2.0, 0.0))
    env.process(job("b", 1.0, 1.0))
    env.process(job("z", 0.0, 0.5))
    env.run()
    assert ends == pytest.approx({"a": 3.0, "b": 3.0, "z": 0.5})


def test_a_job_closer_to_its_end_than_the_clock_can_step_finishes():
    """Late in a long simulation (a 2-rank CPU trace asked for 100,000 ranks: 1,200 s iterations) a job's
    last 1.5e-12 s is below the clock's resolution at t = 2e4 s: the core woke at the same instant for ever,
    and the What-if page said "the simulation stopped after 24,576 events, past its estimate"."""
    from ddpsim.sim.budget import run_bounded

    env = simpy.Environment(initial_time=2e4)
    done = Core(env).run(1.5e-12)
    run_bounded(env, 10_000, None)
    assert done.triggered and env.now == 2e4
    trace = load_trace(BUNDLED_DIR / "01_mlp_torch_default.json")
    w = learn(trace)
    _, summary = simulate_workload(w, replay_config(w, trace, world_size=100_000, bucket_cap_mb=0.25))
    assert summary["iteration_time_s"] > 100 and summary["simpy_events"] < 4 * summary["estimated_events"]


def tiny_shared(concurrency=2):
    """4 params of 1 MiB, ready 3,2,1,0 one second apart; a 2 MiB allreduce takes 1.5 s alone."""
    return Workload(
        name="tiny", params=[ParamSpec(i, f"p{i}", MIB) for i in range(4)],
        ready_order=[3, 2, 1, 0], grad_compute_s=[1.0] * 4,
        link=Link(alpha_s=0.0, bandwidth_Bps=2 * MIB / 1.5, concurrency=concurrency, shared_core=True),
        forward_s=1.0, optimizer_s=0.5)


def test_shared_core_timeline():
    # Steady iteration from 0: forward 0-1; grads 3, 2 at 2, 3 -> bucket 0 launches at 3.
    # Grad 1 (1 s) and bucket 0 (1.5 s) share the core at 1/2: grad 1 at 5, 0.5 s of comm left.
    # Grad 0 and the comm at 1/2: comm ends at 6, grad 0 has 0.5 s left, alone: 6.5.
    # Bucket 1 alone 6.5-8; optimizer 8-8.5.  Iteration 8.5 s, exposed comm 1.5 s.
    trace, s = simulate(tiny_shared(), SimConfig(world_size=2, bucket_cap_mb=2, iters=3))
    assert s["iteration_time_s"] == pytest.approx(8.5)
    assert s["exposed_comm_s"] == pytest.approx(1.5)
    it = trace.ranks[0].iterations[1]
    t0 = it.forward.start_ns
    rel = lambda ns: (ns - t0) / 1e9  # noqa: E731
    assert [rel(g.t_ns) for g in it.grad_ready] == pytest.approx([2.0, 3.0, 5.0, 6.5])
    assert [(rel(b.launch_ns), rel(b.complete_ns)) for b in it.buckets] == [
        pytest.approx((3.0, 6.0)), pytest.approx((6.5, 8.0))]


def test_two_collectives_and_compute_get_a_third_each():
    # cap 1 MiB: bucket i = param 3-i; a 1 MiB allreduce takes 3 s alone (gloo: 2 in flight).
    # grad 3 at 2 -> b0 launches. grad 2 + b0 at 1/2: grad 2 at 4 (b0: 2 s left), b1 launches.
    # grad 1 + b0 + b1 at 1/3: grad 1 at 7 (b0: 1 left, b1: 2 left).
    # grad 0 + b0 + b1 at 1/3: grad 0 and b0 at 10.
    w = tiny_shared()
    w.link = w.link.with_(bandwidth_Bps=MIB / 3)
    trace, _ = simulate(w, SimConfig(world_size=2, bucket_cap_mb=1, iters=3))
    it = trace.ranks[0].iterations[1]
    t0 = it.forward.start_ns
    assert [(g.t_ns - t0) / 1e9 for g in it.grad_ready] == pytest.approx([2.0, 4.0, 7.0, 10.0])
    assert (it.buckets[0].complete_ns - t0) / 1e9 == pytest.approx(10.0)


def test_shared_work_integral():
    # [0, 10] with one collective in [2, 6]: 2 + 4/2 + 4 = 8
    assert _shared_work(0, 10, [(2, 6, 0)], 1) == pytest.approx(8.0)
    # a collective [2, 6] alone, compute until 4: 2/2 + 2 = 3
    assert _shared_work(2, 6, [(2, 6, 0)], 0, (0, 4)) == pytest.approx(3.0)


def test_extraction_inverts_the_shared_core_model():
    trace, s = simulate(tiny_shared(), SimConfig(world_size=2, bucket_cap_mb=2, iters=4))
    w = workload_from_trace(trace)
    assert w.link.shared_core and w.link.interference == 0.0
    assert w.grad_compute_s == pytest.approx([1.0] * 4)
    assert w.link.allreduce_s(2 * MIB, 2) == pytest.approx(1.5)
    _, again = simulate(w, SimConfig(world_size=2, bucket_cap_mb=2, iters=4))
    assert again["iteration_time_s"] == pytest.approx(s["iteration_time_s"])


def test_explicit_interference_turns_the_shared_core_off():
    # the app's "what if on network X" passes an interference: then no processor sharing
    # (b0 3-4.5 overlaps grads 1, 0 at full speed: 8.5 -> the exact timeline of test_sim_model, 7 s)
    _, s = simulate(tiny_shared(), SimConfig(world_size=2, bucket_cap_mb=2, iters=3, interference=0.0))
    assert s["iteration_time_s"] == pytest.approx(7.0)
    assert s["link"]["shared_core"] is False
    _, s = simulate(tiny_shared(), SimConfig(world_size=2, bucket_cap_mb=2, iters=3, shared_core=True))
    assert s["iteration_time_s"] == pytest.approx(8.5)


# ---------------------------------------------------------------- latency-bound collectives


def test_share_rates():
    from ddpsim.sim.core import share

    assert share([1.0, 1.0]) == pytest.approx([0.5, 0.5])  # plain processor sharing
    assert share([1.0, 1.0, 1.0]) == pytest.approx([1 / 3] * 3)
    # compute + a collective using half of the core when alone: the collective is slowed
    # like a full job (1/2); it uses 0.5 * 1/2 of the core, compute gets the rest
    assert share([1.0, 0.5]) == pytest.approx([0.75, 0.5])
    # two such collectives slow each other only by their demand: 1 / (1 + 0.5)
    assert share([0.5, 0.5]) == pytest.approx([2 / 3, 2 / 3])


def test_light_job_beside_compute_timeline():
    # compute 2 s and a collective (2 s alone, half of it CPU work) from 0:
    # compute at 0.75 ends at 8/3; the collective at 1/2 has 2/3 left, alone: 10/3.
    env = simpy.Environment()
    core = Core(env)
    ends = {}

    def job(name, size, demand):
        yield core.run(size, demand)
        ends[name] = env.now

    env.process(job("compute", 2.0, 1.0))
    env.process(job("allreduce", 2.0, 0.5))
    env.run()
    assert ends == pytest.approx({"compute": 8 / 3, "allreduce": 10 / 3})


def test_core_work_from_a_cpu_time_fit():
    link = Link.from_fit(0.002, 1e-9, 2, core_fit=(0.0005, 0.5e-9), shared_core=True)
    assert link.allreduce_s(10**6, 2) == pytest.approx(0.003)
    assert link.core_s(10**6, 2) == pytest.approx(0.001)
    assert Link().core_s(10**6, 2) == Link().allreduce_s(10**6, 2)  # no fit: all core work
    with pytest.raises(ValueError, match="core bandwidth"):
        Link(core_bandwidth_Bps=-1.0)
    for bad in (-0.004, float("nan")):
        with pytest.raises(ValueError, match="time slice"):
            Link(time_slice_s=bad)


def test_collective_with_cpu_fit_slows_compute_less():
    # tiny_shared at 1 MiB buckets: the same collectives, once all core work, once 1/3
    # of it: backward is faster when the allreduces mostly wait.
    w = tiny_shared()
    w.link = w.link.with_(bandwidth_Bps=MIB / 3)
    _, full = simulate(w, SimConfig(world_size=2, bucket_cap_mb=1, iters=3))
    w.link = w.link.with_(core_bandwidth_Bps=MIB / 1)
    assert w.link.core_s(MIB, 2) == pytest.approx(1.0)
    _, light = simulate(w, SimConfig(world_size=2, bucket_cap_mb=1, iters=3))
    assert light["iteration_time_s"] < full["iteration_time_s"]


def test_extraction_inverts_light_collectives():
    w = tiny_shared()
    w.link = w.link.with_(core_bandwidth_Bps=2 * MIB / 0.5)  # 2 MiB: 1.5 s, of it 0.5 s CPU work
    trace, s = simulate(w, SimConfig(world_size=2, bucket_cap_mb=2, iters=4))
    trace.meta["calibration"] = {"world_size": 2, "intercept_s": 0.0, "s_per_byte": 1.5 / (2 * MIB),
                                 "cpu_intercept_s": 0.0, "cpu_s_per_byte": 0.5 / (2 * MIB)}
    w2 = workload_from_trace(trace)
    assert w2.link.allreduce_s(2 * MIB, 2) == pytest.approx(1.5)
    assert w2.link.core_s(2 * MIB, 2) == pytest.approx(0.5)
    assert w2.grad_compute_s == pytest.approx([1.0] * 4)
    _, again = simulate(w2, SimConfig(world_size=2, bucket_cap_mb=2, iters=4))
    assert again["iteration_time_s"] == pytest.approx(s["iteration_time_s"])


# ---------------------------------------------------------------- ranks that share a CPU


def test_two_ranks_per_core_take_twice_as_long():
    # 4 ranks on 2 cores, communication free: every compute phase is shared by 2 ranks.
    # Alone: forward 1 + 4 grads + optimizer 0.5 = 5.5 s; shared: 11 s.
    w = tiny_shared()
    w.link = w.link.with_(bandwidth_Bps=1e15)
    _, alone = simulate(w, SimConfig(world_size=4, bucket_cap_mb=2, iters=3))
    w.link = w.link.with_(cpus=2)
    trace, shared = simulate(w, SimConfig(world_size=4, bucket_cap_mb=2, iters=3))
    assert alone["iteration_time_s"] == pytest.approx(5.5)
    assert shared["iteration_time_s"] == pytest.approx(11.0)
    opt = trace.ranks[0].iterations[1].optimizer
    assert opt.duration_ns / 1e9 == pytest.approx(1.0)  # the step's real span, not optimizer_s


def test_extraction_inverts_ranks_sharing_a_cpu():
    w = tiny_shared()
    w.link = w.link.with_(cpus=2)
    trace, s = simulate(w, SimConfig(world_size=4, bucket_cap_mb=2, iters=4))
    w2 = workload_from_trace(trace)
    assert w2.link.cpus == 2
    assert w2.grad_compute_s == pytest.approx([1.0] * 4)
    assert (w2.forward_s, w2.optimizer_s) == pytest.approx((1.0, 0.5))
    assert w2.link.allreduce_s(2 * MIB, 4) == pytest.approx(w.link.allreduce_s(2 * MIB, 4))
    _, again = simulate(w2, SimConfig(world_size=4, bucket_cap_mb=2, iters=4))
    assert again["iteration_time_s"] == pytest.approx(s["iteration_time_s"])


def test_pinned_cpus_from_meta():
    from ddpsim.learn.contention import pinned_cpus

    trace, _ = simulate(tiny_shared(), SimConfig(world_size=2, bucket_cap_mb=2, iters=2))
    assert pinned_cpus(trace) == 0
    trace.source = "real"
    trace.meta["pinning"] = {"cpus": 2}
    assert pinned_cpus(trace) == 2


def _owned_jobs(core, env, jobs, ends, keep_after=None):
    """Processes running ``jobs`` [(name, owner, [works...], start)] one work after another."""
    def job(name, owner, works, start):
        yield env.timeout(start)
        for w in works:
            yield core.run(w, owner=owner)
        ends[name] = env.now
        if keep_after == name:
            core.keep(owner)

    for j in jobs:
        env.process(job(*j))


def test_ranks_take_turns_on_a_shared_core():
    # Note [Ranks take turns on a shared core]: rank 0 and rank 2, 3 s of work each,
    # slice 1 s: 0 runs 0-1, 2 runs 1-2, 0 2-3, 2 3-4, 0 4-5 (done), 2 5-6 (done).
    # Equal shares would finish both at 6 s. Rank 0's 3 s as three 1 s jobs back to
    # back keep its turn at each instant between them: the same timeline.
    for works in ([3.0], [1.0, 1.0, 1.0]):
        env, ends = simpy.Environment(), {}
        core = Core(env, time_slice_s=1.0)
        _owned_jobs(core, env, [("r0", 0, works, 0.0), ("r2", 2, [3.0], 0.0)], ends)
        env.run()
        assert ends == pytest.approx({"r0": 5.0, "r2": 6.0})


def test_a_rank_that_blocks_hands_over_and_keep_holds_the_turn():
    # Slice 2 s. r0 works 1 s then stops: r2 (arrived at 0 with 2 s) runs at once from 1 -> 3.
    env, ends = simpy.Environment(), {}
    core = Core(env, time_slice_s=2.0)
    _owned_jobs(core, env, [("r0", 0, [1.0], 0.0), ("r2", 2, [2.0], 0.0)], ends)
    env.run()
    assert ends == pytest.approx({"r0": 1.0, "r2": 3.0})
    # The same, but r0 keeps its turn after its work (it goes on with other work): r2
    # waits for the end of r0's slice at 2 s and finishes at 4 s.
    env, ends = simpy.Environment(), {}
    core = Core(env, time_slice_s=2.0)
    _owned_jobs(core, env, [("r0", 0, [1.0], 0.0), ("r2", 2, [2.0], 0.0)], ends, keep_after="r0")
    env.run()
    assert ends == pytest.approx({"r0": 1.0, "r2": 4.0})


def test_turns_leave_collectives_alone():
    # A light job (demand 0.5, 1 s alone) beside two owners' 2 s of compute, slice 1 s:
    # share([1, 1, 0.5]) gives it 1/3 -> 3 s, and the compute 5/12 of the core each
    # on average; taking turns, the owner of the moment gets 5/6 of it.
    env, ends = simpy.Environment(), {}
    core = Core(env, time_slice_s=1.0)

    def light():
        yield core.run(1.0, demand=0.5)
        ends["light"] = env.now

    env.process(light())
    _owned_jobs(core, env, [("r0", 0, [2.0], 0.0), ("r2", 2, [2.0], 0.0)], ends)
    env.run()
    # r0 runs 0-1 at 5/6 (7/6 left), r2 1-2 (7/6 left), r0 2-3 (1/3 left); the light job
    # ends at 3; r2 3-4 with the whole core (1/6 left), r0 4-4 1/3 (done), r2 to 4.5.
    assert ends == pytest.approx({"light": 3.0, "r0": 4.0 + 1 / 3, "r2": 4.5})
