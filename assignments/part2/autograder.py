"""Part 2 autograder: the student's BucketedDDP on 2 real gloo processes.

One run (5 SGD steps of GradeNet, see ddpsim/grade/part2_harness.py) feeds most tests:
correctness against single-process training, rank agreement, frozen/tied parameters, the
trace the student's code reported and, from the harness's own measurements (its own gradient
hooks and its own wrapper around torch.distributed.all_reduce, ddpsim/grade/probe.py; nothing
the student's code reports), the buckets allreduced, their launch order and the overlap.
A second, short 2-rank run (UnusedNet: a layer never called in the forward) checks that finalize
raises a RuntimeError naming the parameter that got no gradient.

Run: python -m ddpsim.grade part2 path/to/bucketed_ddp.py [--json results.json]
"""
from __future__ import annotations

import math
import re
from functools import partial
from pathlib import Path

from ddpsim.grade import points, watch
from ddpsim.grade import part2_harness as H
from ddpsim.grade.probe import analyse, expected_buckets
from ddpsim.grade.ranks import RankFailure, run_ranks

ATOL, RTOL = 1e-5, 1e-4
# Note [Measured overlap] (ddpsim/grade/probe.py). The reference overlapped 23 to 40 of the 40
# allreduces that could (14 gradings on a loaded 2-core machine); waiting in the hook or launching
# after backward overlaps none, by construction. The bar sits far from both.
MIN_OVERLAP = 0.25  # share of the allreduces that could overlap (all ranks and steps) that did


def real_run(ctx):
    """Run the student's DDP on 2 ranks once; returns (per-rank results, trace)."""
    def compute():
        from ddpsim.record.merge import merge_files
        from ddpsim.trace import TraceFormatError

        template = str(ctx.tmp / "run.json.rank{rank}.jsonl")
        outs = two_ranks(ctx, H.rank_main, template)
        try:
            trace = merge_files([template.format(rank=r) for r in range(2)], ctx.tmp / "run.json")
        except TraceFormatError as e:  # only the trace check reads it: the others grade the run
            trace = e
        return outs, trace
    return ctx.shared("run", compute)


def two_ranks(ctx, rank_main, template: str, failed: str = "the 2-rank run failed", name: str = "GradeNet") -> list:
    """``rank_main`` on 2 gloo ranks, stopped after ``ctx.rank_timeout``; a rank's failure as one line.
    Each rank's stderr and progress go to ``ctx.tmp/name`` (Note [A stuck rank says where])."""
    assert hasattr(ctx.student, "BucketedDDP"), f"{ctx.path.name} defines no BucketedDDP (the class TODO 2-4 fill in)"
    folder = ctx.tmp / name
    try:
        # spawn: each rank its own interpreter and string hashing, as under torchrun, so that
        # ranks cannot agree by accident (Note [Ranks forked from a server that imported torch])
        return run_ranks(rank_main, 2, (str(ctx.path), template), timeout=ctx.rank_timeout,
                         setup=partial(watch.start, str(folder)), start_method="spawn")
    except RankFailure as e:
        if e.not_implemented:
            raise NotImplementedError(e.not_implemented) from None
        raise AssertionError(f"{failed}: {_why(e, folder, ctx.path)}") from None


def _why(e: RankFailure, folder: Path, student: Path) -> str:
    """A failed run in one line: a hang names each rank's step, line and bucket; a rank that died, what it
    printed (the whole text is printed after the report)."""
    if e.rank < 0:
        head = re.match(r"timed out after \S+ s", e.summary)
        stuck = watch.describe_stuck(folder, 2)
        return f"{head.group(0)}: {stuck}" if head and stuck else e.summary
    summary = re.sub(r"module 'ddpsim_student_part2' has no attribute '(\w+)'",
                     rf"{Path(student).name} defines no \1", e.summary)
    words = watch.last_words(folder, e.rank) if e.summary.startswith(("died from", "process exited")) else ""
    said = f"; on stderr it said: {words} (all it printed is below the report)" if words else ""
    return f"rank {e.rank}: {summary}{_where(e.error, student)}{_hint(e.summary)}{said}"


def _hint(summary: str) -> str:
    """What a known failure usually means, as a question: a gradient missing when a hook used it is
    most often every hook reading one index (a lambda made in a loop keeps the loop's variable)."""
    if "NoneType" in summary and "Tensor" in summary:
        return ("; a .grad was None when your code used it: does each hook pass its own parameter's index "
                "(a lambda made in a loop needs it as a default: lambda p, i=i: ...)?")
    return ""


def _where(traceback_text: str, student) -> str:
    """" (at FILE:LINE)": the student's innermost line in a rank's traceback, if it is there."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', traceback_text)
    name = Path(student).name
    line = next((n for f, n in reversed(frames) if Path(f).resolve() == Path(student).resolve()), None)
    return f" (at {name}:{line})" if line else ""


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
        "not divided by world size? copied back before the bucket's allreduce finished (wait for its "
        "future in finalize)? copied back to the wrong parameter?)")


@points(2, name="ranks are identical after 5 steps")
def test_ranks_agree(ctx):
    (r0, r1), _ = real_run(ctx)
    assert close(r0["final"], r1["final"]), \
        f"the ranks' parameters differ by up to {max_diff(r0['final'], r1['final']):.3g} after {H.STEPS} steps"


@points(2, name="frozen parameter untouched, tied weight still shared")
def test_frozen_and_tied(ctx):
    (r0, r1), _ = real_run(ctx)
    assert r0["frozen_unchanged"] and r1["frozen_unchanged"], "the frozen layer's weight changed"
    assert r0["tied"] and r1["tied"], "fc3.weight is no longer the same tensor as fc2.weight"


@points(2, name="your trace: every gradient and bucket reported")
def test_trace_complete(ctx):
    _, trace = real_run(ctx)
    n_ddp = len(H.expected_params(H.GradeNet()))
    hint = (f"; its buckets must name DDP's parameters, 0..{n_ddp - 1} (reducer_params)"
            if "is not in params" in str(trace) else "")
    assert not isinstance(trace, Exception), f"the trace your code reported does not load: {trace}{hint}"
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


def verdicts(ctx):
    """The harness's measurements, per (rank, step): see ddpsim/grade/probe.py."""
    def compute():
        outs, _ = real_run(ctx)
        params = H.expected_params(H.GradeNet())
        buckets = expected_buckets(params, int(H.BUCKET_CAP_MB * 1024 * 1024))
        numels = [p.numel() for p in params]
        sizes = [sum(numels[i] for i in b) for b in buckets]
        assert len(set(sizes)) == len(sizes), "harness: GradeNet's bucket sizes must differ"
        return buckets, sizes, [(r, step, analyse(it, buckets, numels))
                                for r, out in enumerate(outs) for step, it in enumerate(out["probe"])]
    return ctx.shared("verdicts", compute)


@points(4, name="one allreduce per bucket of DDP's layout (measured by the harness)")
def test_buckets_allreduced(ctx):
    buckets, sizes, runs = verdicts(ctx)
    for rank, step, v in runs:
        assert v.sizes_ok, (
            f"rank {rank} step {step}: the harness saw {len(v.order)} dist.all_reduce calls on "
            f"tensors of {sorted(_numels(ctx, rank, step))} elements; DDP's {len(buckets)} buckets "
            f"hold {sorted(sizes)} (one allreduce per bucket, on the whole bucket buffer: keep the "
            "given bucket layout, and call dist.all_reduce)")
    return f"passed: {len(buckets)} allreduces per step of {sizes} elements, every rank and step"


def _numels(ctx, rank, step):
    outs, _ = real_run(ctx)
    return [n for n, _, _ in outs[rank]["probe"][step]["collectives"]]


@points(4, name="launch order is bucket order (measured by the harness)")
def test_launch_order(ctx):
    _, _, runs = verdicts(ctx)
    for rank, step, v in runs:
        known = [k for k in v.order if k is not None]
        assert known and known == sorted(known), (
            f"rank {rank} step {step}: the harness saw the buckets' allreduces start in the order "
            f"{v.order}; they must start strictly 0, 1, 2, ... on every rank, whatever order the "
            "buckets fill in (bucket 5, GradeNet's head, fills first)")


@points(5, name="overlap: gradients keep coming while buckets are on the wire (measured)")
def test_overlap(ctx):
    buckets, _, runs = verdicts(ctx)
    overlapped = sum(v.overlapped for _, _, v in runs)
    could = sum(v.could_overlap for _, _, v in runs)
    need = math.ceil(MIN_OVERLAP * could)
    detail = (f"{overlapped} of the {could} allreduces that could overlap backward had a later "
              f"gradient become ready while in flight ({len(runs)} rank-steps of {len(buckets)} "
              f"buckets; at least {need} needed)")
    assert could > 0, "harness: no bucket could overlap (a rank reported no gradients?)"
    early = sum(v.launched_before_last_grad for _, _, v in runs)
    ordered = all([k for k in v.order if k is not None] == sorted(k for k in v.order if k is not None) for _, _, v in runs)
    hint = ("none started before backward's last gradient: launch each bucket from the hook as "
            "soon as it and every earlier bucket are full" if not early else
            f"{early} started before backward's last gradient, but finished before the next "
            "gradient came: " + ("launch with async_op=True and wait for the results only in finalize" if ordered
                                 else "they started out of bucket order (check 2.8), which can cause this"))
    assert overlapped >= need, f"{detail}: {hint}"
    return "passed: " + detail


@points(2, name="a parameter that gets no gradient: finalize raises a RuntimeError naming it")
def test_unused_parameter_named(ctx):
    name, index = H.unused_param()
    what = f"a parameter that got no gradient ({name}, index {index})"
    outs = two_ranks(ctx, H.unused_rank_main, str(ctx.tmp / "unused.rank{rank}.jsonl"),
                     f"{what}: the 2-rank run of {H.UnusedNet.__name__} failed", H.UnusedNet.__name__)
    for rank, out in enumerate(outs):
        message = out.get("message", "")
        first = " ".join(message.split())[:200]
        assert out["raised"] is not None, \
            f"{what}: backward() ended without an error on rank {rank}; finalize() must raise a RuntimeError naming it"
        assert out["runtime_error"], (f"{what}: backward() raised {out['raised']}: {first}"
                                      f"{_where(out['traceback'], ctx.path)} on rank {rank}, not a RuntimeError naming it")
        named = name in message or _number(index, message)
        assert named, (f"{what}: rank {rank}'s RuntimeError names neither index {index} nor {name}: "
                       f"{first!r}")
        names = H.ddp_param_names(H.UnusedNet())
        others = ", ".join(f"{names.index(n)} {n}" for n in _others_named(message, index, name, names))
        assert not others, (f"{what}: rank {rank}'s RuntimeError also names parameters that got a gradient "
                            f"({others}); name only the one(s) that got none: {first!r}")
    return f"passed: RuntimeError: {first}"


def _number(i: int, text: str) -> bool:
    return re.search(rf"(?<![\w.]){i}(?!\w|\.\d)", text) is not None


def _others_named(message: str, index: int, name: str, names: list[str]) -> list[str]:
    """The parameters that got a gradient which ``message`` names as if they had not: a list ([...], (...),
    {...}) of parameters (indices or names) holding the unused one and others, or, outside the lists of
    the others alone ("came: [0, 1, 2]" is fine), every parameter (each name, or each index as a number)."""
    others, rest = set(), message
    for m in re.finditer(r"[\[({]([^\[\](){}]*)[\])}]", message):
        items = [t.strip().strip("'\"") for t in m.group(1).split(",") if t.strip()]
        as_params = [names[int(t)] if t.isdigit() and int(t) < len(names) else t for t in items]
        if items and all(t in names for t in as_params):
            if name in as_params:
                others |= set(as_params) - {name}
            else:
                rest = rest.replace(m.group(0), " ")
    named = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?![\w.])", rest)]
    if len(named) == len(names) or all(_number(i, rest) for i in range(len(names))):
        others = set(names) - {name}
    return [n for n in names if n in others]
