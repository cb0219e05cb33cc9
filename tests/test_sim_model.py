"""Hand-computed timelines for the simpy DDP model (ddpsim.sim)."""
import pytest

from ddpsim.sim import Link, ParamSpec, SimConfig, Workload, simulate

MIB = 1024 * 1024


def tiny(comm_s=1.5, concurrency=1, interference=0.0, unused=()):
    """4 params of 1 MiB, ready 3,2,1,0 one second apart; 2 MiB allreduce takes comm_s at k=2.

    Ring at k=2 with alpha=0: t = S/B, so B = 2 MiB / comm_s.
    """
    ready = [p for p in (3, 2, 1, 0) if p not in unused]
    return Workload(
        name="tiny", params=[ParamSpec(i, f"p{i}", MIB) for i in range(4)],
        ready_order=ready, grad_compute_s=[1.0] * len(ready),
        link=Link(alpha_s=0.0, bandwidth_Bps=2 * MIB / comm_s, concurrency=concurrency,
                  interference=interference),
        forward_s=1.0, optimizer_s=0.5, unused=list(unused))


def cfg(**kw):
    base = dict(world_size=2, bucket_cap_mb=2, iters=3)
    base.update(kw)
    return SimConfig(**base)


def test_two_buckets_exact_timeline():
    # fwd 0-1; grads at 2,3 (bucket 0 ready 3, comm 3-4.5); grads 4,5 (bucket 1, comm 5-6.5);
    # optimizer 6.5-7.  Iteration 7 s, exposed 1.5 s, overlap 1.5/3.
    trace, s = simulate(tiny(), cfg())
    assert s["iteration_time_s"] == pytest.approx(7.0)
    assert s["exposed_comm_s"] == pytest.approx(1.5)
    assert s["overlap_fraction"] == pytest.approx(0.5)
    assert s["n_buckets"] == 2
    it1 = trace.ranks[0].iterations[1]  # starts at 8.5 s, after iteration 0's single bucket
    assert it1.forward.start_ns == 8_500_000_000
    assert [(b.bucket, b.ready_ns, b.launch_ns, b.complete_ns) for b in it1.buckets] == [
        (0, 11_500_000_000, 11_500_000_000, 13_000_000_000),
        (1, 13_500_000_000, 13_500_000_000, 15_000_000_000)]


def test_iteration0_single_bucket_then_rebuild():
    trace, s = simulate(tiny(), cfg())
    r0 = trace.ranks[0]
    assert [l.kind for l in r0.layouts] == ["construction", "rebuilt"]
    assert [b.params for b in r0.layouts[0].buckets] == [[0, 1, 2, 3]]
    assert [b.params for b in r0.layouts[1].buckets] == [[3, 2], [1, 0]]
    it0 = r0.iterations[0]  # 4 MiB at t=5 takes 3 s, optimizer to 8.5 s
    assert it0.end_ns == 8_500_000_000
    assert s["steady_iterations"] == [1, 2]


def test_static_graph_rebuilds_one_iteration_later():
    trace, _ = simulate(tiny(), cfg(static_graph=True, iters=4))
    assert [(l.kind, l.from_iteration) for l in trace.ranks[0].layouts] == [
        ("construction", 0), ("rebuilt", 2)]
    assert len(trace.ranks[0].iterations[1].buckets) == 1


def test_find_unused_never_rebuilds_and_adds_bitmap():
    trace, _ = simulate(tiny(), cfg(find_unused_parameters=True))
    r0 = trace.ranks[0]
    assert len(r0.layouts) == 1
    # construction: caps over definition order [0,1],[2,3], reversed -> bucket 0 = [2,3]
    assert [b.params for b in r0.layouts[0].buckets] == [[2, 3], [0, 1]]
    it = r0.iterations[1]
    assert it.bitmap_allreduce is not None and it.bitmap_allreduce.bytes == 16
    assert it.bitmap_allreduce.launch_ns >= max(b.launch_ns for b in it.buckets)
    assert it.graph_search is not None


def test_unused_params_need_find_unused():
    with pytest.raises(ValueError, match="find_unused_parameters"):
        simulate(tiny(unused=(1,)), cfg())
    trace, s = simulate(tiny(unused=(1,)), cfg(find_unused_parameters=True))
    unused = [g for g in trace.ranks[0].iterations[1].grad_ready if g.unused]
    assert [g.param for g in unused] == [1]


def test_straggler_delays_everyone():
    # rank 1 computes 2x slower: fwd 0-2, grads 4,6 -> bucket 0 at 6 (comm 6-7.5), grads 8,10 ->
    # bucket 1 at 10 (10-11.5), optimizer to 12.  Rank 0 launched bucket 0 at 3 and waits.
    trace, s = simulate(tiny(), cfg(stragglers={1: 2.0}))
    assert s["iteration_time_s"] == pytest.approx(12.0)
    r0 = next(r for r in trace.ranks if r.rank == 0).iterations[2]
    b0 = r0.buckets[0]
    assert (b0.complete_ns - b0.launch_ns) * 1e-9 == pytest.approx(4.5)


def test_definition_order_first_bucket_inversion_stalls():
    # bucket 0 = [0,1] is ready last (t=5); bucket 1 = [2,3] is ready at 3 but waits for it.
    trace, s = simulate(tiny(), cfg(order="definition"))
    assert s["iteration_time_s"] == pytest.approx(8.5)  # 5 + 1.5 + 1.5 (queued) + 0.5
    wait = {row["bucket"]: row["wait_s"] for row in s["per_bucket"]}
    assert wait[1] == pytest.approx(2.0) and wait[0] == pytest.approx(0.0)
    _, s2 = simulate(tiny(concurrency=2), cfg(order="definition"))  # gloo: both in flight
    assert s2["iteration_time_s"] == pytest.approx(7.0)


def test_concurrency_limit_queues():
    # comm 2.5 s per bucket: bucket 1 (ready 5) waits for bucket 0 (3-5.5) with one slot.
    _, s1 = simulate(tiny(comm_s=2.5), cfg())
    _, s2 = simulate(tiny(comm_s=2.5, concurrency=2), cfg())
    assert s1["iteration_time_s"] == pytest.approx(8.5)
    assert s2["iteration_time_s"] == pytest.approx(8.0)


def test_interference_slows_compute_during_comm():
    # grads 1 (index 1) and 0 start at 3 and 4 while bucket 0 (3-4.5) is in flight: 1 s -> 1.5 s
    # for grad 1 (3-4.5); grad 0 starts at 4.5 when nothing is in flight: ends 5.5.
    _, s = simulate(tiny(interference=0.5), cfg())
    assert s["iteration_time_s"] == pytest.approx(7.5)


def test_no_sync_accumulates_without_allreduce():
    trace, s = simulate(tiny(), cfg(no_sync_every=2, iters=3))
    its = trace.ranks[0].iterations
    assert [it.sync for it in its] == [False, True] * 3
    assert all(not it.buckets and it.optimizer is None for it in its if not it.sync)
    # cycle: micro-step 5 s (fwd + 4 grads), then the synced 7 s step -> 6 s per micro-step
    assert s["iteration_time_s"] == pytest.approx(6.0)
    assert [(l.kind, l.from_iteration) for l in trace.ranks[0].layouts] == [
        ("construction", 0), ("rebuilt", 2)]


def test_naive_allreduces_each_param_after_backward():
    _, s = simulate(tiny(), cfg(naive=True, order="torch"))
    # 4 allreduces of 1 MiB (0.75 s each, one slot) after backward ends at 5: 5+3+0.5
    assert s["n_buckets"] == 4
    assert s["iteration_time_s"] == pytest.approx(8.5)
    assert s["overlap_fraction"] == 0.0


def test_tree_and_ring_costs():
    link = Link(alpha_s=1e-5, bandwidth_Bps=1e9, algo="ring")
    assert link.allreduce_s(10**9, 4) == pytest.approx(6e-5 + 1.5)
    tree = Link(alpha_s=1e-5, bandwidth_Bps=1e9, algo="tree")
    assert tree.allreduce_s(10**9, 1024) == pytest.approx(2 * 10 * 1e-5 + 2.0)
    assert link.allreduce_s(123, 1) == 0.0


def test_same_seed_same_output_and_jitter_changes_it():
    a, sa = simulate(tiny(), cfg(world_size=4, jitter=0.1, seed=7))
    b, sb = simulate(tiny(), cfg(world_size=4, jitter=0.1, seed=7))
    c, sc = simulate(tiny(), cfg(world_size=4, jitter=0.1, seed=8))
    assert a.to_dict()["ranks"] == b.to_dict()["ranks"]
    assert sa["iteration_time_s"] == sb["iteration_time_s"] != sc["iteration_time_s"]


def test_large_world_uses_rank_groups():
    trace, s = simulate(tiny(), cfg(world_size=4096, jitter=0.05, iters=2))
    assert trace.meta["world_size"] == 4096
    assert len(trace.ranks) <= 8 and trace.meta["ranks_included"][0] == 0
    assert trace.meta["rank_groups"][0]["kind"] == "max-of-group"
    # the slowest of ~4000 ranks (about +3.5 sigma) sets the pace: slower than no jitter
    _, s0 = simulate(tiny(), cfg(world_size=4096, iters=2))
    assert s["iteration_time_s"] > s0["iteration_time_s"]


@pytest.mark.parametrize("bad, match", [
    (dict(bucket_cap_mb=float("nan")), "bucket_cap_mb"),  # torch takes 0 and -1 (test_bucket_cap_list.py)
    (dict(bucket_cap_mb=-1, find_unused_parameters=True), "negative bucket cap"),
    (dict(world_size=0), "world size"), (dict(bandwidth_gbps=float("nan")), "bandwidth"),
    (dict(bandwidth_gbps=-5.0), "bandwidth"), (dict(order="sideways"), "order"),
    (dict(stragglers={9: 2.0}), "straggler"), (dict(no_sync_every=0), "no_sync_every"),
])
def test_bad_config_is_valueerror(bad, match):
    with pytest.raises(ValueError, match=match):
        simulate(tiny(), cfg(**bad))


def test_workload_without_gradients_is_valueerror():
    with pytest.raises(ValueError, match="no gradient events"):
        Workload(name="empty", params=[], ready_order=[], grad_compute_s=[], link=Link())


def test_backward_scale_slows_one_rank_backward_only():
    # rank 1's backward at half speed: grads at 3, 5, 7, 9 after its forward (not scaled);
    # bucket 0 waits for it (launch 5, comm 5-6.5), bucket 1 launches at 9 (9-10.5), step 10.5-11.
    trace, s = simulate(tiny(), cfg(backward_scale={1: 2.0}))
    assert s["iteration_time_s"] == pytest.approx(11.0)
    it = trace.ranks[1].iterations[1]
    t0 = it.forward.start_ns
    assert (it.forward.end_ns - t0) / 1e9 == pytest.approx(1.0)
    assert [(g.t_ns - t0) / 1e9 for g in it.grad_ready] == pytest.approx([3.0, 5.0, 7.0, 9.0])
    assert [((b.launch_ns - t0) / 1e9, (b.complete_ns - t0) / 1e9) for b in it.buckets] == [
        pytest.approx((5.0, 6.5)), pytest.approx((9.0, 10.5))]
    with pytest.raises(ValueError, match="backward_scale rank 5"):
        cfg(backward_scale={5: 2.0}).validate()


def test_launch_cost_holds_the_autograd_thread():
    # Note [Launching costs the autograd thread]: 0.25 s per launch (+0 per byte).
    # grads 3, 2 at 2, 3 -> bucket 0 launches at 3; the hook holds backward until 3.25,
    # grads 1, 0 at 4.25, 5.25 -> bucket 1 launches at 5.25 (comm 5.25-6.75), step to 7.25.
    w = tiny()
    w.launch_s = 0.25
    trace, s = simulate(w, cfg())
    assert s["iteration_time_s"] == pytest.approx(7.25)
    it = trace.ranks[0].iterations[1]
    t0 = it.forward.start_ns
    assert [(g.t_ns - t0) / 1e9 for g in it.grad_ready] == pytest.approx([2.0, 3.0, 4.25, 5.25])
    assert w.launch_cost(MIB) == 0.25
