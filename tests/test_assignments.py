# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""The course's autograder against answers whose grade is known: every reference solution
gets full marks, and each known-wrong part 2 solution loses the points of exactly the check
that names its mistake. The student-safe self-checks (starters, bad input, the release) are in
tests/test_grade.py; this file and tests/instructor/ are left out of the student release."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpsim.grade import validate_results

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "tests" / "instructor" / "solutions"
WRONG = ROOT / "tests" / "instructor" / "wrong"
REFERENCES = {"part1": SOLUTIONS / "part1_buckets.py",
              "part2": SOLUTIONS / "part2_bucketed_ddp.py",
              "part3": SOLUTIONS / "part3_predict.py"}
# wrong part 2 solution -> the one check (a substring of its name) that must fail
WRONG_PART2 = {
    "part2_no_overlap.py": "overlap:",  # (a) every bucket launched after backward
    "part2_wait_at_once.py": "overlap:",  # (b) launched from the hook, waited on at once
    "part2_ready_order.py": "launch order",  # (c) launched as buckets fill, not in bucket order
    "part2_wrong_boundaries.py": "one allreduce per bucket",  # (d) its own, wrong, buckets
    "part2_not_averaged.py": "single-process training",  # (e) summed, not averaged
    "part2_no_unused_check.py": "gets no gradient",  # (g) finalize never raises for an unused parameter
}
# wrong part 1 and part 3 solutions -> the checks that must fail ("*": every check)
WRONG_OTHER = {
    ("part1", "part1_calls_torch.py"): "*",  # torch's function through a name built at run time
    ("part3", "part3_made_up_rows.py"): "predict_sweep",  # rows not from the simulator
    ("part3", "part3_copied_trace.py"): "the real run",  # an old recording relabelled
    ("part3", "part3_default_cap_everywhere.py"): "over LINK",  # 25 MiB without simulating
}
_graded: dict[Path, tuple[int, dict, str]] = {}


def grade(part: str, student: Path, out_dir: Path) -> tuple[int, dict, str]:
    """Grade once per test session (the table reuses the runs)."""
    if student not in _graded:
        out = out_dir / f"{part}-{student.stem}.json"
        proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", part, str(student),
                               "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert "Traceback" not in proc.stderr, proc.stderr
        assert out.is_file(), f"no results JSON written\n{proc.stdout}\n{proc.stderr}"
        _graded[student] = (proc.returncode, json.loads(out.read_text()), proc.stdout)
    return _graded[student]


@pytest.mark.slow
@pytest.mark.parametrize("part", sorted(REFERENCES))
def test_reference_solution_gets_full_marks(part, tmp_path):
    rc, results, stdout = grade(part, REFERENCES[part], tmp_path)
    assert validate_results(results) == []
    failed = [t for t in results["tests"] if t["score"] < t["max_score"]]
    assert not failed, stdout
    assert rc == 0 and results["score"] == results["max_score"] == sum(
        t["max_score"] for t in results["tests"])
    print(stdout)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(WRONG_PART2))
def test_wrong_part2_solution_fails_its_check(name, tmp_path):
    rc, results, stdout = grade("part2", WRONG / name, tmp_path)
    assert validate_results(results) == []
    failed = [t["name"] for t in results["tests"] if t["score"] < t["max_score"]]
    assert rc == 1 and results["score"] < results["max_score"], stdout
    assert len(failed) == 1 and WRONG_PART2[name] in failed[0], \
        f"expected only the {WRONG_PART2[name]!r} check to fail, failed: {failed}\n{stdout}"


@pytest.mark.slow
def test_part1_answer_in_lists_as_the_handout_allows_gets_full_marks(tmp_path):
    """The handout says "lists, as torch does"; a pair returned as a list scored 2/28 ("must return a
    pair ..., got [[[0, 1, 2]], [26214400]]")."""
    lists = tmp_path / "buckets.py"
    lists.write_text(f"import importlib.util\n"
                     f"spec = importlib.util.spec_from_file_location('ref', {str(REFERENCES['part1'])!r})\n"
                     "ref = importlib.util.module_from_spec(spec)\nspec.loader.exec_module(ref)\n\n\n"
                     "def compute_bucket_assignment_by_size(*args):\n"
                     "    return list(ref.compute_bucket_assignment_by_size(*args))\n")
    rc, results, stdout = grade("part1", lists, tmp_path)
    assert rc == 0 and results["score"] == results["max_score"], stdout


def test_part1_generated_checks_catch_a_bucket_closed_above_its_limit(tmp_path):
    """Closing a bucket at > its limit (reducer.cpp: >=) passed 1.6 and 1.8, the generated checks: their
    random limits (1-20000 bytes) never equalled a bucket's size, so only the hand-picked cases failed."""
    rc, results, stdout = grade("part1", WRONG / "part1_closes_above_the_cap.py", tmp_path)
    failed = {t["number"] for t in results["tests"] if t["score"] < t["max_score"]}
    assert rc == 1 and {"1.6", "1.7", "1.8"} <= failed, stdout


def test_part1_rebuild_check_draws_exact_limits_from_the_order_the_function_sees():
    """1.8 drew its exact limits (runs of consecutive tensors' bytes, to catch a bucket closed at > its limit)
    from the parameters as defined, but the student's function sees them in `tensor_indices` order, where
    only runs of one tensor are still runs. Each of its examples now draws them from what the function sees."""
    from ddpsim.grade.core import load_file

    grader = load_file(ROOT / "assignments" / "part1" / "autograder.py", "ddpsim_autograder_part1_rebuild")
    wrong = load_file(WRONG / "part1_closes_above_the_cap.py", "ddpsim_wrong_part1_rebuild")
    exact_limits, check, drawn, same = grader.exact_limits, grader.check, [], []

    def limits_from(data, spec):  # the grader's own helpers, each call's spec kept
        drawn.append(list(spec))
        return exact_limits(data, spec)

    def graded_on(student, spec, limits, indices=(), **kw):  # an example's limits are its last drawn
        same.append(drawn[-1] == list(spec))
        try:
            check(student, spec, limits, indices=indices, **kw)
        except AssertionError:
            pass  # the wrong solution fails some examples: keep drawing all of them

    grader.exact_limits, grader.check = limits_from, graded_on
    grader.test_generated_rebuild_order(SimpleNamespace(student=wrong))
    assert len(same) == 60 and all(same), f"{same.count(False)} of {len(same)} examples drew them elsewhere"


def test_part1_sparse_check_reads_expect_sparse_gradient_by_tensor_index(tmp_path):
    """expect_sparse_gradient is indexed by tensor index (reducer.cpp); a solution that read it by position
    in `tensors` scored 28/28: 1.9 had one case, without tensor_indices, where the two agree."""
    text = REFERENCES["part1"].read_text()
    by_position = tmp_path / "buckets.py"
    by_position.write_text(text.replace("for tensor, index in zip(tensors, indices):",
                                        "for pos, (tensor, index) in enumerate(zip(tensors, indices)):")
                           .replace("expect_sparse_gradient[index]", "expect_sparse_gradient[pos]"))
    assert "expect_sparse_gradient[pos]" in by_position.read_text()
    rc, results, stdout = grade("part1", by_position, tmp_path)
    failed = {t["number"]: t["output"] for t in results["tests"] if t["score"] < t["max_score"]}
    assert rc == 1 and set(failed) == {"1.9"}, stdout
    assert "tensor_indices [3, 2, 1, 0], sparse [False, True, False, False]" in failed["1.9"], stdout


@pytest.mark.slow
def test_part2_copying_back_without_waiting_is_told_to_wait(tmp_path):
    """finalize without `future.wait()` copies the buckets back before their allreduce lands; 2.3 said
    "gradients not averaged? not divided by world size? copied back to the wrong parameter?", none of which
    was the mistake."""
    text = REFERENCES["part2"].read_text()
    no_wait = tmp_path / "bucketed_ddp.py"
    no_wait.write_text(text.replace("            bucket.future.wait()\n", ""))
    assert no_wait.read_text() != text
    _, results, stdout = grade("part2", no_wait, tmp_path)
    failed = {t["number"]: t["output"] for t in results["tests"] if t["score"] < t["max_score"]}
    assert "2.3" in failed and "wait for its future in finalize" in failed["2.3"], stdout


@pytest.mark.slow
def test_part2_keeps_the_students_run_to_open_in_the_app(tmp_path):
    """The handout says a student can look at their own run; the grader deleted it with its scratch folder."""
    from ddpsim import load_trace

    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part2", str(REFERENCES["part2"]), "--keep",
                           str(tmp_path / "mine"), "--quiet"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "open it in the app" in proc.stdout, proc.stdout + proc.stderr
    trace = load_trace(tmp_path / "mine" / "run.json")
    assert trace.complete and [len(r.iterations) for r in trace.ranks] == [5, 5]


@pytest.mark.slow
def test_an_error_inside_a_rank_names_the_students_line(tmp_path):
    """A rank's error said what but not where ("rank 1: RuntimeError: cannot register a hook on a tensor
    that doesn't require gradient"), while an error in the grader's own process has "(at FILE:LINE)"."""
    text = REFERENCES["part2"].read_text()
    frozen_kept = tmp_path / "bucketed_ddp.py"  # keeps the frozen layer: its hook cannot be registered
    frozen_kept.write_text(text.replace("if p.requires_grad and id(p) not in seen", "if id(p) not in seen"))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "register_post_accumulate_grad_hook(" in t)
    _, results, stdout = grade("part2", frozen_kept, tmp_path)
    failed = [t["output"] for t in results["tests"] if t["score"] < t["max_score"]]
    assert any(f"doesn't require gradient (at bucketed_ddp.py:{line})" in o for o in failed), stdout


@pytest.mark.slow
def test_a_layout_mistake_costs_its_checks_not_the_run(tmp_path):
    """Counting the tied weight twice scored 0/30: the trace it reported would not load, and that failed
    every check of the 2-rank run. Now the run is graded: it trains right, and the checks that read the
    layout say what is wrong."""
    rc, results, stdout = grade("part2", WRONG / "part2_tied_twice.py", tmp_path)
    assert validate_results(results) == [] and rc == 1
    failed = {t["number"]: t["output"] for t in results["tests"] if t["score"] < t["max_score"]}
    assert set(failed) == {"2.1", "2.6", "2.7", "2.8"}, stdout  # the run trains as single-process training
    assert "tied counted once" in stdout and "must name DDP's parameters, 0..12" in failed["2.6"], stdout


UNUSED_CHECK = "2.10"  # a parameter that gets no gradient: finalize raises a RuntimeError naming it


def unused_check(results: dict) -> dict:
    return next(t for t in results["tests"] if t["number"] == UNUSED_CHECK)


@pytest.mark.slow
def test_part2_unused_parameter_check_passes_the_reference_and_fails_the_starter_and_a_silent_finalize(tmp_path):
    """TODO 4 asks finalize to raise a RuntimeError naming the parameters that got no gradient; nothing
    graded it (GradeNet uses every parameter), so a finalize without the check scored 30/30."""
    _, results, stdout = grade("part2", REFERENCES["part2"], tmp_path)
    check = unused_check(results)
    assert check["score"] == check["max_score"] == 2 and "gets no gradient" in check["name"], stdout
    assert check["output"].startswith("passed: RuntimeError: ") and "[4]" in check["output"], stdout

    _, results, stdout = grade("part2", ROOT / "assignments" / "part2" / "bucketed_ddp.py", tmp_path)
    assert unused_check(results)["output"].startswith("not implemented: TODO 1: "), stdout

    _, results, stdout = grade("part2", WRONG / "part2_no_unused_check.py", tmp_path)
    check = unused_check(results)
    failed = [t["number"] for t in results["tests"] if t["score"] < t["max_score"]]
    assert failed == [UNUSED_CHECK] and results["score"] == results["max_score"] - 2, stdout
    assert check["output"] == ("a parameter that got no gradient (unused.weight, index 4): backward() ended "
                               "without an error on rank 0; finalize() must raise a RuntimeError naming it"), stdout


@pytest.mark.slow
@pytest.mark.parametrize("variant,expected", [
    ("raise ValueError(f'missing {missing}')", "backward() raised ValueError: missing [4] (at bucketed_ddp.py:"),
    ("raise RuntimeError('a bucket never launched on rank 0 of 2')",
     "rank 0's RuntimeError names neither index 4 nor unused.weight: 'a bucket never launched on rank 0 of 2'"),
    ("raise RuntimeError(str([n for n, p in self.module.named_parameters() "
     "if any(p is self.params[i] for i in missing)]))", "passed: RuntimeError: ['unused.weight']"),
    # it passed: the 4 is among them
    ("raise RuntimeError(f'parameters {list(range(len(self.params)))} got no gradient')",
     "rank 0's RuntimeError also names parameters that got a gradient (0 fc1.weight, 1 fc1.bias, 2 fc2.weight, "
     "3 fc2.bias, 5 head.weight, 6 head.bias); name only the one(s) that got none: 'parameters [0, 1, 2, 3, 4, 5, 6] "
     "got no gradient'"),
])
def test_part2_unused_parameter_check_wants_a_runtime_error_that_names_it(variant, expected, tmp_path):
    """By index in self.params or by name, as the handout says; another exception or a message that names
    neither fails, in one line that says which."""
    text = REFERENCES["part2"].read_text()
    old = next(line for line in text.splitlines() if "raise RuntimeError(" in line)
    end = text.index("\n", text.index("got no gradient: not used in the forward?"))
    student = tmp_path / "bucketed_ddp.py"
    student.write_text(text[:text.index(old)] + " " * (len(old) - len(old.lstrip())) + variant + text[end:])
    _, results, stdout = grade("part2", student, tmp_path)
    check = unused_check(results)
    assert expected in check["output"] and len(check["output"].splitlines()) == 1, stdout
    assert [t["number"] for t in results["tests"] if t["score"] < t["max_score"]] == (
        [] if expected.startswith("passed") else [UNUSED_CHECK]), stdout


@pytest.mark.slow
def test_part2_a_finalize_that_hangs_on_an_unused_parameter_is_stopped_at_the_rank_timeout(tmp_path):
    """A finalize that waits for a bucket that never fills hangs only in the unused-parameter run."""
    text = REFERENCES["part2"].read_text()
    hang = tmp_path / "bucketed_ddp.py"
    hang.write_text(text.replace("        if missing:  #", "        while missing:\n            import time\n"
                                 "            time.sleep(1)\n        if missing:  #"))
    assert "time.sleep(1)" in hang.read_text()
    out = tmp_path / "hang.json"
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part2", str(hang), "--json", str(out),
                           "--rank-timeout", "20"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    # 20 s: a 2-rank run beside the other test worker's ranks took over 8 s to start on 2 busy cores
    assert time.monotonic() - start < 120 and "Traceback" not in proc.stdout + proc.stderr, proc.stdout
    results = json.loads(out.read_text())
    assert [t["number"] for t in results["tests"] if t["score"] < t["max_score"]] == [UNUSED_CHECK], proc.stdout
    line = next(i for i, t in enumerate(hang.read_text().splitlines(), 1) if "time.sleep(1)" in t)
    assert unused_check(results)["output"] == (  # it said "(a rank hangs: waiting for a bucket that never launches?)"
        "a parameter that got no gradient (unused.weight, index 4): the 2-rank run of UnusedNet failed: "
        f"timed out after 20 s: ranks 0 and 1 each stuck in step 0's backward at bucketed_ddp.py:{line} "
        "(finalize: time.sleep(1)): bucket 1 of 4 never launched, parameter(s) [4] had no gradient"), proc.stdout


@pytest.mark.slow
def test_part2_a_hang_names_each_ranks_step_line_and_bucket(tmp_path):
    """Rank 1 never marks its last bucket ready (a pending count off by one) and each rank's finalize waits on a
    future made in prepare_for_backward: the hang read "timed out after 20 s (a rank hangs: waiting for a bucket
    that never launches?)", naming no rank, no step, no line and no bucket."""
    text = REFERENCES["part2"].read_text()
    reset = "            bucket.pending = len(bucket.param_indices)\n            bucket.future = None\n"
    assert reset in text
    hang = tmp_path / "bucketed_ddp.py"
    hang.write_text(text.replace(reset, "            bucket.pending = len(bucket.param_indices) + (dist.get_rank() == 1 "
                                        "and bucket.index == len(self.buckets) - 1)\n"
                                        "            bucket.future = torch.futures.Future()\n"))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "bucket.future.wait()" in t)
    out = tmp_path / "hang.json"
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part2", str(hang), "--json", str(out),
                           "--rank-timeout", "20"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    results = json.loads(out.read_text())
    check = next(t for t in results["tests"] if t["number"] == "2.2")
    at = f"at bucketed_ddp.py:{line} (finalize: bucket.future.wait())"
    assert check["output"] == (
        f"the 2-rank run failed: timed out after 20 s: rank 0 stuck in step 0's backward {at}: waiting for bucket "
        "5's allreduce (launched, never finished: did the other rank launch it, in the same order?); rank 1 stuck "
        f"in step 0's backward {at}: bucket 5 of 6 never launched, though all its gradients ([0, 1]) were ready"), \
        proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("part,name", sorted(WRONG_OTHER))
def test_wrong_part1_part3_solution_fails_its_check(part, name, tmp_path):
    rc, results, stdout = grade(part, WRONG / name, tmp_path)
    assert validate_results(results) == []
    failed = [t["name"] for t in results["tests"] if t["score"] < t["max_score"]]
    assert rc == 1 and results["score"] < results["max_score"], stdout
    if WRONG_OTHER[part, name] == "*":
        assert results["score"] == 0, stdout
    else:
        assert len(failed) == 1 and WRONG_OTHER[part, name] in failed[0], \
            f"expected only the {WRONG_OTHER[part, name]!r} check to fail, failed: {failed}\n{stdout}"


@pytest.mark.slow
def test_autograder_table(tmp_path):
    """The table for the record: each wrong part 2 solution and the reference, as graded."""
    rows = [("reference", REFERENCES["part2"])] + [(n, WRONG / n) for n in sorted(WRONG_PART2)]
    lines = [f"{'part 2 solution':<28} {'score':>7}  {'overlap':>8}  failed check"]
    for label, path in rows:
        _, results, _ = grade("part2", path, tmp_path)
        failed = [t for t in results["tests"] if t["score"] < t["max_score"]]
        overlap_check = next(t for t in results["tests"] if t["name"].startswith("overlap:"))
        overlap = re.search(r"(\d+) of the (\d+) allreduces", overlap_check["output"])
        lines.append(f"{label:<28} {results['score']:>3g}/{results['max_score']:<3g}  "
                     f"{'/'.join(overlap.groups()) if overlap else '?':>8}  "
                     + ("; ".join(f"{t['number']} {t['name']}" for t in failed) or "-"))
        assert (label == "reference") == (not failed)
    print("\n" + "\n".join(lines))


def test_instructor_files_stay_out_of_the_student_tree():
    from ddpsim.grade.release import is_instructor_only

    for path in list(REFERENCES.values()) + sorted(WRONG.glob("*.py")) + [Path(__file__)]:
        assert is_instructor_only(path), f"{path} lacks the instructor-only first line"
        assert ROOT / "assignments" not in path.parents
    assert not (ROOT / "assignments" / "solutions").exists()
    for part, solution in REFERENCES.items():
        assert "NotImplementedError" not in solution.read_text()


@pytest.mark.slow
def test_part2_hooks_that_share_one_index_are_told_about_the_loop_variable(tmp_path):
    """Hooks made as lambdas in a loop without ``i=i`` all read the last index: torch's TypeError pointed
    at the line, but nothing said why a .grad was None there."""
    rc, results, stdout = grade("part2", WRONG / "part2_late_binding.py", tmp_path)
    assert validate_results(results) == [] and rc == 1
    failed = {t["number"]: t["output"] for t in results["tests"] if t["score"] < t["max_score"]}
    run = [o for n, o in failed.items() if n != UNUSED_CHECK]
    assert run and all("part2_late_binding.py:18" in o and "lambda p, i=i" in o for o in run), stdout
    # in UnusedNet's run every hook reports the last index: its finalize names 0-5, which got gradients, as missing
    assert "also names parameters that got a gradient" in failed[UNUSED_CHECK], stdout
