"""Part 2 autograder: the student's BucketedDDP on 2 real gloo processes.

One run (5 SGD steps of GradeNet, see ddpsim/grade/part2_harness.py) feeds most tests:
correctness against single-process training, rank agreement, frozen/tied parameters,
and, from the ddpsim trace the student's code reported, overlap and launch order.

Run: python -m ddpsim.grade part2 path/to/bucketed_ddp.py [--json results.json]
"""
from __future__ import annotations

import math

from ddpsim.grade import points
from ddpsim.grade import part2_harness as H
from ddpsim.grade.ranks import RankFailure, run_ranks

ATOL, RTOL = 1e-5, 1e-4


def real_run(ctx):
    """Run the student's DDP on 2 ranks once; returns (per-rank results, trace)."""
    def compute():
        from ddpsim.record.merge import merge_files

        template = str(ctx.tmp / "run.json.rank{rank}.jsonl")
        try:
            outs = run_ranks(H.rank_main, 2, (str(ctx.path), template), timeout=90)
        except RankFailure as e:
            if e.not_implemented:
                raise NotImplementedError(e.not_implemented) from None
            raise AssertionError(f"the 2-rank run failed: rank {e.rank}: "
                                 f"{e.error.strip().splitlines()[-1]}") from None
        trace = merge_files([template.format(rank=r) for r in range(2)], ctx.tmp / "run.json")
        return outs, trace
    return ctx.shared("run", compute)


def close(a, b):
    return len(a) == len(b) and all(math.isclose(x, y, rel_tol=RTOL, abs_tol=ATOL) for x, y in zip(a, b))


def max_diff(a, b):
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


@points(3, name="reducer_params: frozen skipped, tied counted once, DDP order")
def test_reducer_params(ctx):
    model = H.GradeNet()
    got = ctx.student.reducer_params(model)
    want = H.expected_params(model)
    names = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)
    show = lambda ps: [names.get(id(p), "?") for p in ps]  # noqa: E731
    assert [id(p) for p in got] == [id(p) for p in want], \
        f"expected {show(want)}, got {show(got)}"


@points(3, name="ranks are identical after the constructor's broadcast")
def test_broadcast(ctx):
    (r0, r1), _ = real_run(ctx)
    assert not close(r0["before"], r1["before"]), "harness: ranks should start different"
    assert close(r0["after_broadcast"], r1["after_broadcast"]), \
        "after BucketedDDP(...) the ranks' weights differ (the broadcast from rank 0 is missing?)"
    assert close(r0["after_broadcast"], r0["before"]), "rank 0's weights changed in the constructor"


@points(5, name="5 steps on 2 ranks == single-process training on the full batch")
def test_matches_single_process(ctx):
    (r0, _), _ = real_run(ctx)
    want = H.single_process_reference()
    assert close(r0["final"], want), (
        f"after {H.STEPS} steps rank 0's parameters differ from single-process training on the "
        f"full batch by up to {max_diff(r0['final'], want):.3g} (gradients not averaged? "
        "not divided by world size? copied back to the wrong parameter?)")


@points(3, name="ranks are identical after 5 steps")
def test_ranks_agree(ctx):
    (r0, r1), _ = real_run(ctx)
    assert close(r0["final"], r1["final"]), \
        f"the ranks' parameters differ by up to {max_diff(r0['final'], r1['final']):.3g} after {H.STEPS} steps"


@points(3, name="frozen parameter untouched, tied weight still shared")
def test_frozen_and_tied(ctx):
    (r0, r1), _ = real_run(ctx)
    assert r0["frozen_unchanged"] and r1["frozen_unchanged"], "the frozen layer's weight changed"
    assert r0["tied"] and r1["tied"], "fc3.weight is no longer the same tensor as fc2.weight"


@points(3, name="the trace: every gradient and bucket reported")
def test_trace_complete(ctx):
    _, trace = real_run(ctx)
    n_params = len([p for p in trace.params if p.index is not None])
    for rank in trace.ranks:
        layout = rank.layout_at(0)
        assert layout and len(layout.buckets) >= 2, \
            f"rank {rank.rank}: expected several buckets with a {H.BUCKET_CAP_MB} MiB cap"
        assert len(rank.iterations) == H.STEPS, f"rank {rank.rank}: {len(rank.iterations)} iterations"
        for it in rank.iterations:
            got = sorted(g.param for g in it.grad_ready)
            assert got == list(range(n_params)), (
                f"rank {rank.rank} iteration {it.iteration}: grad_ready reported for params {got}, "
                f"expected each of 0..{n_params - 1} once (recorder.grad_ready in on_grad_ready)")
            launched = sorted(b.bucket for b in it.buckets)
            assert launched == list(range(len(layout.buckets))), (
                f"rank {rank.rank} iteration {it.iteration}: buckets launched {launched}, expected each "
                f"of 0..{len(layout.buckets) - 1} once (recorder.bucket_launch in launch)")
            assert all(b.complete_ns >= b.launch_ns for b in it.buckets), \
                "a bucket completed before it launched (chain recorder.bucket_complete on the future)"


@points(5, name="overlap: an earlier bucket's allreduce starts before backward ends")
def test_overlap(ctx):
    _, trace = real_run(ctx)
    overlapped, total = 0, 0
    for rank in trace.ranks:
        for it in rank.iterations:
            total += 1
            last_grad = max(g.t_ns for g in it.grad_ready)
            first = min(it.buckets, key=lambda b: b.launch_ns)
            overlapped += first.launch_ns < last_grad
    assert overlapped >= total * 0.8, (
        f"the first allreduce launched before the last gradient was ready in only {overlapped} of "
        f"{total} iterations: launch a bucket as soon as it (and every bucket before it) is full, "
        "from the hook, not after backward")


@points(5, name="launch order is bucket order")
def test_launch_order(ctx):
    _, trace = real_run(ctx)
    for rank in trace.ranks:
        for it in rank.iterations:
            order = [b.bucket for b in sorted(it.buckets, key=lambda b: (b.launch_ns, it.buckets.index(b)))]
            assert order == sorted(order), (
                f"rank {rank.rank} iteration {it.iteration}: buckets launched in order {order}; "
                "they must launch strictly 0, 1, 2, ... on every rank")
