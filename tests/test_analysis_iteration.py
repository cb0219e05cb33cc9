"""ddpsim.analysis.iteration_report: one iteration beside the steady state (the Timeline page's numbers)."""
import pytest

from ddpsim.analysis import TraceAnalysis, cycle_metrics, iteration_report
from ddpsim.sim import Link, ParamSpec, SimConfig, Workload, simulate

MIB = 1 << 20


def trace(no_sync_every=1):
    w = Workload(name="two", params=[ParamSpec(i, f"p{i}", MIB) for i in range(2)], ready_order=[1, 0],
                 grad_compute_s=[1.0, 1.0], link=Link(alpha_s=0.0, bandwidth_Bps=MIB), forward_s=1.0,
                 optimizer_s=0.5)
    return simulate(w, SimConfig(world_size=2, iters=3, bucket_cap_mb=1, no_sync_every=no_sync_every))[0]


def test_a_synced_iteration_reports_its_own_metrics():
    t = trace()
    r = iteration_report(t, 1)
    assert r["metrics"] == cycle_metrics(t, [1])
    assert r["steady"]["iteration_time_s"] == pytest.approx(r["metrics"]["iteration_time_s"])
    assert r["enqueue_gap"] is None  # no CPU times in a simulated trace
    it = t.ranks[0].iteration(1)
    assert r["span_ms"] == pytest.approx(round((max(it.end_ns, it.buckets[-1].complete_ns)
                                                - it.forward.start_ns) * 1e-6, 1) + 0.1)


def test_a_no_sync_step_has_no_communication_to_report():
    r = iteration_report(trace(no_sync_every=2), 2)  # micro-steps 0,1 | 2,3 | 4,5: 2 is no_sync
    assert r["metrics"]["exposed_comm_s"] is None and r["metrics"]["overlap_fraction"] is None
    assert r["metrics"]["iteration_time_s"] > 0


def test_an_iteration_no_rank_recorded_is_a_key_error():
    with pytest.raises(KeyError):
        TraceAnalysis(trace()).iteration(99)


def test_ranks_that_never_communicate_are_timed_each_on_its_own():
    """The noop hook sends nothing, so a slow rank falls further behind each iteration: the iteration
    time is the slowest rank's own, not the growing distance between the ranks (it was 41.9 ms on the
    What-if page for a run whose ranks took 22-32 ms each, and find_unused_parameters' bitmap
    allreduce, which ties them again, looked faster)."""
    work = Workload(name="two", params=[ParamSpec(i, f"p{i}", MIB) for i in range(2)], ready_order=[1, 0],
                    grad_compute_s=[1.0, 1.0], link=Link(alpha_s=0.0, bandwidth_Bps=MIB), forward_s=1.0,
                    optimizer_s=0.5)
    t = simulate(work, SimConfig(world_size=2, iters=4, bucket_cap_mb=1, comm_hook="noop",
                                 stragglers={1: 1.5}, trace_ranks=2))[0]
    own = [max(r.iteration(i).end_ns - r.iteration(i).forward.start_ns for r in t.ranks) * 1e-9 for i in (2, 3)]
    drift = [(max(r.iteration(i).end_ns for r in t.ranks) - min(r.iteration(i).forward.start_ns for r in t.ranks))
             * 1e-9 for i in (2, 3)]
    assert drift[1] > drift[0] > own[0]  # the ranks drift apart
    assert [cycle_metrics(t, [i])["iteration_time_s"] for i in (2, 3)] == pytest.approx(own)
    tied = trace()  # with collectives the ranks finish together: first start to last end
    span = max(r.iteration(2).end_ns for r in tied.ranks) - min(r.iteration(2).forward.start_ns for r in tied.ranks)
    assert cycle_metrics(tied, [2])["iteration_time_s"] == pytest.approx(span * 1e-9)


def test_a_buffer_broadcast_ties_ranks_that_never_communicate_otherwise():
    """With buffers (BatchNorm) every step opens with rank 0's buffer broadcast, even under noop, and a
    rank that finished its last step early waits there: that wait is the other rank's last step, not
    this one. Ranks taking turns being slow (rank 0 in even steps, rank 1 in odd ones), each step takes
    from its broadcast to the slow rank's end, the time from one step's latest start to the next's; the
    slowest rank's own span also held its wait for the rank that was slow the step before (on the
    bundled convnet with no_sync 3 a noop what-if read 111.3 ms against 105.2 ms with allreduces)."""
    work = Workload(name="two", params=[ParamSpec(i, f"p{i}", MIB) for i in range(2)], ready_order=[1, 0],
                    grad_compute_s=[1.0, 1.0], link=Link(alpha_s=0.0, bandwidth_Bps=MIB), forward_s=1.0,
                    optimizer_s=0.5, buffer_bytes=1024)
    turns = {r: {"forward": speeds, "backward": speeds, "gap_s": [0.0, 0.0]}
             for r, speeds in ((0, [1.0, 2.0]), (1, [2.0, 1.0]))}
    t = simulate(work, SimConfig(world_size=2, iters=6, bucket_cap_mb=1, comm_hook="noop",
                                 recorded_ranks=turns, trace_ranks=2))[0]
    assert all(r.iteration(2).buffer_broadcast for r in t.ranks)
    for i in (2, 3, 4):
        latest = [max(r.iteration(k).forward.start_ns for r in t.ranks) for k in (i, i + 1)]
        own = max(r.iteration(i).end_ns - r.iteration(i).forward.start_ns for r in t.ranks)
        assert own > 1.2 * (latest[1] - latest[0])  # the early rank's wait at the broadcast
        assert cycle_metrics(t, [i])["iteration_time_s"] == pytest.approx((latest[1] - latest[0]) * 1e-9)
