"""The simulator's platform (ddpsim/sim/platform.py): devices, the network, shared CPU cores."""
import pytest
import simpy

from ddpsim.sim import Link, ParamSpec, SimConfig, Workload, simulate
from ddpsim.sim.model import Actor, Work
from ddpsim.sim.platform import Devices, SharedCores, platform_for

MIB = 1024 * 1024


def actors(n):
    return [Actor(r, 1, [1.0]) for r in range(n)]


def work(env, key, nbytes=MIB):
    return Work((0, key), nbytes, 0, env.event())


def run_transfers(platform, env, n):
    """Start n collectives at t=0; their (start, end) times."""
    works = [work(env, i) for i in range(n)]

    def one(w):
        yield from platform.transfer(w)
        w.end = env.now

    for w in works:
        env.process(one(w))
    env.run()
    return [(w.start, w.end) for w in works]


def test_the_link_picks_the_platform():
    env = simpy.Environment()
    assert type(platform_for(env, Link(), 2, actors(2))) is Devices
    assert type(platform_for(env, Link(shared_core=True), 2, actors(2))) is SharedCores


def test_devices_run_at_most_concurrency_collectives_at_once():
    # 1 MiB at 1 MiB/s, ring over 2 ranks: 1 s each; two slots -> the third waits for the first
    env = simpy.Environment()
    link = Link(alpha_s=0.0, bandwidth_Bps=MIB, concurrency=2)
    assert run_transfers(Devices(env, link, 2, actors(2)), env, 3) == [(0, 1), (0, 1), (1, 2)]


def test_collectives_beyond_the_links_concurrency_share_its_bandwidth():
    """Note [Process groups share the link]: a round-robin hook's second slot hides latency, not bandwidth."""
    link = Link(alpha_s=1e-3, bandwidth_Bps=MIB * 1000.0)  # 2 ranks: 2 ms latency + 1 ms for 1 MiB
    env = simpy.Environment()
    alone = Devices(env, link, 2, actors(2))
    assert run_transfers(alone, env, 2) == [(0.0, pytest.approx(3e-3)), (pytest.approx(3e-3), pytest.approx(6e-3))]
    env = simpy.Environment()
    two = Devices(env, link, 2, actors(2))
    two.slots = simpy.Resource(env, capacity=2)  # as sim/api.py widens it for round-robin:2
    # both latencies at once, then both megabytes on one wire: 2 ms + 2 x 1 ms, not 3 ms each
    assert [end for _, end in run_transfers(two, env, 2)] == [pytest.approx(4e-3), pytest.approx(4e-3)]


def test_round_robin_groups_do_not_multiply_a_gpu_clusters_bandwidth():
    from ddpsim.sim import synthetic
    from ddpsim.sim.archs import arch_defaults
    w = synthetic("resnet50", "a100-eth25")  # 8 GPUs a node, one 25 GbE NIC: ResNet-50 is network-bound
    runs = {hook: simulate(w, SimConfig(world_size=64, bucket_cap_mb=5, **arch_defaults(w, comm_hook=hook),
                                        **({"comm_hook": hook} if hook else {})))[1]
            for hook in (None, "round-robin:4", "noop")}
    busy = sum(b["allreduce_s"] for b in runs[None]["nccl"])  # the NIC's time for one step's buckets
    assert busy > runs["noop"]["iteration_time_s"]  # more than the compute: the network sets the pace
    four = runs["round-robin:4"]["iteration_time_s"]
    assert runs[None]["iteration_time_s"] * 0.95 < four <= runs[None]["iteration_time_s"]  # it was 0.43x


def test_devices_slow_a_gradient_while_its_own_rank_has_a_collective_launched():
    # Note [Communication slows compute from the rank's own launch]: from rank 0's launch at
    # 1 s, through waiting for its peer (until 2 s) and the 1 s transfer (until 3 s); never rank 1
    env = simpy.Environment()
    acts = actors(2)
    dev = Devices(env, Link(alpha_s=0.0, bandwidth_Bps=MIB, interference=0.5), 2, acts)
    times = {}

    def rank0():
        yield dev.gradient(acts[0], 1.0)  # nothing launched: 1 s
        times["alone"] = env.now
        w = work(env, "b")
        dev.launched(acts[0], w)
        env.process(peer(w))
        yield dev.gradient(acts[0], 1.0)  # peer not there yet: 1.5 s
        times["waiting"] = env.now
        yield dev.gradient(acts[0], 0.2)  # transfer 2 s .. 3 s: 0.3 s
        times["moving"] = env.now
        yield env.timeout(3.0 - env.now)
        yield dev.gradient(acts[0], 1.0)  # done at 3 s exactly: 1 s
        times["after"] = env.now

    def peer(w):
        yield dev.gradient(acts[1], 0.4)  # from 1 s: rank 0's launch does not slow rank 1
        times["other rank"] = env.now
        yield env.timeout(2.0 - env.now)  # rank 1 launches at 2 s
        dev.launched(acts[1], w)
        yield from dev.transfer(w)
        w.done.succeed()

    env.process(rank0())
    env.run()
    assert times == pytest.approx({"alone": 1.0, "waiting": 2.5, "moving": 2.8, "after": 4.0, "other rank": 1.4})


def test_shared_cores_pin_rank_r_to_core_r_mod_cpus():
    env = simpy.Environment()
    acts = actors(4)
    cores = SharedCores(env, Link(shared_core=True, cpus=2), 4, acts)
    assert cores.core_of[id(acts[0])] is cores.core_of[id(acts[2])]
    assert cores.core_of[id(acts[1])] is not cores.core_of[id(acts[0])]
    assert [c.ranks for c in cores.cores] == [2, 2]


def test_two_ranks_on_one_core_share_it():
    env = simpy.Environment()
    acts = actors(2)
    cores = SharedCores(env, Link(shared_core=True, cpus=1), 2, acts)
    ends = []

    def job(a):
        yield cores.compute(a, 1.0)
        ends.append(env.now)

    for a in acts:
        env.process(job(a))
    env.run()
    assert ends == pytest.approx([2.0, 2.0])  # processor sharing: each at half speed


def test_a_collective_is_cpu_work_on_every_core():
    # alone on its core a 1 s collective takes 1 s; beside 1 s of compute (demand 1 each) both take 2 s
    env = simpy.Environment()
    acts = actors(2)
    cores = SharedCores(env, Link(alpha_s=0.0, bandwidth_Bps=MIB, shared_core=True), 2, acts)
    ends = {}

    def compute():
        yield cores.compute(acts[0], 1.0)
        ends["compute"] = env.now

    env.process(compute())
    assert run_transfers(cores, env, 1) == [(0, pytest.approx(2.0))]
    assert ends["compute"] == pytest.approx(2.0)


def test_a_platform_is_pluggable():
    """A platform whose devices run compute twice as long doubles the forward pass, and nothing else."""
    class SlowDevices(Devices):
        def compute(self, actor, seconds):
            return self.env.timeout(2 * seconds)

    w = Workload(name="one", params=[ParamSpec(0, "p0", MIB)], ready_order=[0], grad_compute_s=[1.0],
                 link=Link(alpha_s=0.0, bandwidth_Bps=MIB), forward_s=1.0, optimizer_s=0.5)
    base, _ = simulate(w, SimConfig(world_size=2, iters=1))
    slow, _ = simulate(w, SimConfig(world_size=2, iters=1), platform=SlowDevices)
    f0, f1 = base.ranks[0].iterations[0].forward, slow.ranks[0].iterations[0].forward
    assert (f0.end_ns - f0.start_ns, f1.end_ns - f1.start_ns) == (1_000_000_000, 2_000_000_000)
    g0, g1 = base.ranks[0].iterations[0].grad_ready[0], slow.ranks[0].iterations[0].grad_ready[0]
    assert g1.t_ns - f1.end_ns == g0.t_ns - f0.end_ns == 1_000_000_000  # gradients: platform.gradient
