"""Part 1 autograder: the student's compute_bucket_assignment_by_size against torch's own
``torch.distributed._compute_bucket_assignment_by_size`` (the real C++ algorithm),
on hand-picked cases and on many generated parameter lists (hypothesis). Every call of the
student's function runs under a ``Tripwire``: calling torch's or ddpsim's implementation, by any
route, fails the test.

Run: python -m ddpsim.grade part1 path/to/buckets.py [--json results.json]
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ddpsim
from ddpsim import torchcompat
from ddpsim.grade import points

MIB = 1024 * 1024
DTYPES = {"float32": torch.float32, "float16": torch.float16, "float64": torch.float64,
          "bfloat16": torch.bfloat16}
# s per test: a correct solution takes well under a second for all of them, and a `while` loop that
# never ends would otherwise hold the grader the default 120 s per test (18 minutes)
TIMEOUT = 15.0
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck), print_blob=False)


def tensors(spec):
    """[(numel, dtype name)] -> empty tensors (only their sizes and dtypes matter)."""
    return [torch.empty(n, dtype=DTYPES[d]) for n, d in spec]


def oracle(ts, limits, sparse=(), indices=()):
    return torchcompat.compute_bucket_assignment_by_size(ts, limits, sparse, indices)


class Tripwire:
    """Watches a call of the student's function (``sys.setprofile``) for a call of torch's
    ``_compute_bucket_assignment_by_size`` or of any function in the ddpsim package, however it
    was reached (an import, ``getattr`` on a built string, ...): the answer must be computed."""

    DDPSIM = str(Path(ddpsim.__file__).resolve().parent)
    GRADER = str(Path(ddpsim.__file__).resolve().parent / "grade")  # its own time limit's alarm runs in the call

    def __init__(self):
        self.hit = None

    def _watch(self, frame, event, arg):
        if self.hit:
            return
        if event == "c_call" and getattr(arg, "__name__", "") == "_compute_bucket_assignment_by_size":
            self.hit = "torch's _compute_bucket_assignment_by_size"
        elif (event == "call" and frame.f_code.co_filename.startswith(self.DDPSIM)
              and not frame.f_code.co_filename.startswith(self.GRADER)):
            self.hit = f"ddpsim's {frame.f_code.co_name} ({Path(frame.f_code.co_filename).name})"

    def __enter__(self):
        sys.setprofile(self._watch)
        return self

    def __exit__(self, exc_type, *exc):
        sys.setprofile(None)
        if exc_type is None:  # what the call raised (a time limit, the student's error) is the result
            assert not self.hit, f"the solution must be your own: it called {self.hit}"


def student_call(student, *args):
    with Tripwire():
        return student.compute_bucket_assignment_by_size(*args)


def check(student, spec, limits, sparse=(), indices=(), any_order=False):
    ts = tensors(spec)
    want = oracle(ts, limits, sparse, indices)
    got = student_call(student, ts, list(limits), list(sparse), list(indices))
    assert isinstance(got, (tuple, list)) and len(got) == 2, \
        f"must return a pair (bucket_indices, per_bucket_size_limits), got {got!r:.200}"  # torch: a tuple
    got = ([list(map(int, b)) for b in got[0]], [int(x) for x in got[1]])
    if any_order:  # torch keeps the leftover buckets of several dtypes in hash order
        same = sorted(zip(map(tuple, got[0]), got[1])) == sorted(zip(map(tuple, want[0]), want[1]))
    else:
        same = got == (want[0], want[1])
    sizes = [f"{n}x{d}" for n, d in spec]
    assert same, (f"params {sizes} (bytes {[t.numel() * t.element_size() for t in ts]}), "
                  f"limits {list(limits)}" + (f", tensor_indices {list(indices)}" if indices else "")
                  + (f", sparse {list(sparse)}" if any(sparse) else "")
                  + f":\n  expected {want[0]} limits {want[1]}\n  got      {got[0]} limits {got[1]}")


params = st.lists(st.tuples(st.integers(1, 3000), st.sampled_from(["float32"])), min_size=1, max_size=25)
mixed = st.lists(st.tuples(st.integers(1, 3000), st.sampled_from(sorted(DTYPES))), min_size=1, max_size=25)


def exact_limits(data, spec):
    """Limits drawn at random or, as often, equal to the bytes of a run of consecutive tensors of one
    dtype: a bucket that reaches its limit exactly must close (>=, not >), which random limits
    almost never test (a solution closing at > scored 8 of the 12 generated points)."""
    runs = set()
    for d in {d for _, d in spec}:
        sizes = [n * DTYPES[d].itemsize for n, e in spec if e == d]
        runs |= {sum(sizes[i:j]) for i in range(len(sizes)) for j in range(i + 1, len(sizes) + 1)}
    return data.draw(st.lists(st.one_of(st.integers(1, 20000), st.sampled_from(sorted(runs))),
                              min_size=1, max_size=3))


@points(2, timeout=TIMEOUT, name="does not call torch's or ddpsim's implementation")
def test_own_implementation(ctx):
    tree = ast.parse(ctx.path.read_text())
    names = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    names += [a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not any("_compute_bucket_assignment_by_size" in x or x.startswith("ddpsim") for x in names), \
        "the solution must be your own: do not call torch's or ddpsim's bucket assignment"
    student_call(ctx.student, [torch.empty(4)], [MIB])


@points(3, timeout=TIMEOUT, name="one small model, one 25 MiB bucket")
def test_everything_fits(ctx):
    check(ctx.student, [(100, "float32"), (20, "float32"), (3000, "float32")], [25 * MIB])


@points(3, timeout=TIMEOUT, name="cap overshoot: a bucket closes at >= the cap, after adding")
def test_overshoot(ctx):
    # 400 + 400 bytes reach the 800-byte cap exactly: the bucket closes there.
    check(ctx.student, [(100, "float32"), (100, "float32"), (100, "float32")], [800])
    # 400 + 800 = 1200 >= 1000: the second tensor overshoots the cap, still in bucket one.
    check(ctx.student, [(100, "float32"), (200, "float32"), (10, "float32")], [1000])


@points(3, timeout=TIMEOUT, name="never split: a tensor larger than the cap")
def test_never_split(ctx):
    check(ctx.student, [(10, "float32"), (10_000, "float32"), (10, "float32"), (10, "float32")], [100])


@points(3, timeout=TIMEOUT, name="the small first-bucket cap ([1 MiB, 25 MiB])")
def test_first_bucket_cap(ctx):
    spec = [(300_000, "float32")] * 6 + [(2_000_000, "float32")] * 3
    check(ctx.student, spec, [MIB, 25 * MIB])
    check(ctx.student, [(50, "float32")] * 9, [400, 1000])


@points(4, timeout=TIMEOUT, name="many generated parameter lists (one dtype)")
def test_generated_single_dtype(ctx):
    @SETTINGS
    @given(st.data())
    def prop(data):
        spec = data.draw(params)
        check(ctx.student, spec, exact_limits(data, spec))
    prop()


@points(4, timeout=TIMEOUT, name="mixed dtypes: separate buckets per dtype")
def test_generated_mixed_dtypes(ctx):
    check(ctx.student, [(100, "float32"), (300, "float16"), (50, "float32"), (700, "float16"),
                        (10, "float32")], [400, 1000])

    @SETTINGS
    @given(st.data())
    def prop(data):
        spec = data.draw(mixed)
        check(ctx.student, spec, exact_limits(data, spec))
    prop()


@points(4, timeout=TIMEOUT, name="the rebuild: tensor_indices keep the closing order")
def test_generated_rebuild_order(ctx):
    @SETTINGS
    @given(st.data())
    def prop(data):
        spec = data.draw(mixed)
        order = data.draw(st.permutations(range(len(spec))))
        seen = [spec[i] for i in order]  # what the function gets: the tensors in tensor_indices order
        one_dtype = len({d for _, d in spec}) == 1
        check(ctx.student, seen, exact_limits(data, seen), indices=order, any_order=not one_dtype)
    prop()


@points(2, timeout=TIMEOUT, name="sparse gradients get a bucket each (limit 0)")
def test_sparse(ctx):
    spec = [(100, "float32"), (300, "float32"), (50, "float32"), (10, "float32")]
    check(ctx.student, spec, [400, 1000], sparse=[False, True, False, False])
    check(ctx.student, spec, [400, 1000], sparse=[True, False, True, False])
    # the rebuild: expect_sparse_gradient is indexed by tensor index, not by position in `tensors`
    order = [3, 2, 1, 0]
    check(ctx.student, [spec[i] for i in order], [400, 1000], sparse=[False, True, False, False], indices=order)
