"""The autograder's own behaviour (ddpsim.grade), with no solution needed (kept in the student
release): untouched starters fail every test with "not implemented", bad input gets one line,
a hung rank is stopped with no process left behind, the harness's overlap analysis counts what
it should, and the release leaves every instructor-only file out."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ddpsim.grade import validate_results
from ddpsim.grade.probe import analyse
from ddpsim.proctree import alive

ROOT = Path(__file__).resolve().parent.parent
A = ROOT / "assignments"
STARTERS = {"part1": A / "part1" / "buckets.py", "part2": A / "part2" / "bucketed_ddp.py",
            "part3": A / "part3" / "predict.py"}


def grade(part: str, student: Path, tmp_path: Path, *extra: str, cwd: Path = ROOT):
    out = tmp_path / f"{part}-{student.stem}.json"
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", part, str(student), "--json", str(out),
                           *extra], cwd=cwd, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert out.is_file(), f"no results JSON written\n{proc.stdout}\n{proc.stderr}"
    return proc, json.loads(out.read_text())


@pytest.mark.slow
@pytest.mark.parametrize("part", sorted(STARTERS))
def test_starter_fails_with_not_implemented(part, tmp_path):
    proc, results = grade(part, STARTERS[part], tmp_path)
    assert validate_results(results) == []
    assert proc.returncode == 1 and results["score"] == 0, proc.stdout
    for t in results["tests"]:
        assert t["status"] == "failed" and t["score"] == 0
        assert t["output"].startswith("not implemented: "), f"{t['name']}: {t['output']}"


def test_starters_and_handouts_are_in_place():
    for part, starter in STARTERS.items():
        assert "NotImplementedError" in starter.read_text()
        assert (A / part / "HANDOUT.md").is_file() and (A / part / "autograder.py").is_file()
    assert (A / "README.md").is_file()  # the students' overview (INSTRUCTORS.md is left out of their copy)
    assert not (A / "solutions").exists(), "solutions belong in tests/instructor/ (left out of releases)"


@pytest.mark.slow
def test_a_solution_that_fails_on_several_generated_inputs_says_where_in_one_message(tmp_path):
    """Hypothesis raises an ExceptionGroup when it finds several distinct failures; the student saw
    "ExceptionGroup: Hypothesis found 2 distinct failures. (2 sub-exceptions) (at core.py:2334)"."""
    crash = tmp_path / "buckets.py"
    crash.write_text("def compute_bucket_assignment_by_size(tensors, limits, sparse=(), indices=()):\n"
                     "    out = [[i] for i in range(len(tensors))]\n"
                     "    return out, [limits[i] for i in range(len(out))]  # IndexError past the limits\n")
    _, results = grade("part1", crash, tmp_path)
    outputs = [t["output"] for t in results["tests"] if t["score"] < t["max_score"]]
    assert outputs and not any("ExceptionGroup" in o or "core.py" in o for o in outputs), outputs
    assert any("(at buckets.py:3)" in o for o in outputs) and any("other failure" in o for o in outputs), outputs


def test_validate_results_catches_bad_json():
    good = {"score": 1.0, "tests": [{"name": "a", "score": 1.0, "max_score": 1.0, "output": "ok"}]}
    assert validate_results(good) == []
    assert validate_results({"score": 2.0, "tests": good["tests"]})  # score != sum
    assert validate_results({"score": 1.0, "tests": [{"name": "a", "score": 2, "max_score": 1,
                                                      "output": ""}]})
    assert validate_results({"tests": []})


def run_cli(*args: str, cwd: Path = ROOT):
    return subprocess.run([sys.executable, "-m", "ddpsim.grade", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_grade_command_usage_errors(tmp_path):
    proc = run_cli("part9", "x.py")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = run_cli("part1", str(tmp_path / "missing.py"))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("missing.py does not exist")
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("part1", str(STARTERS["part1"]), "--rank-timeout", "0")
    assert proc.returncode == 2 and "--rank-timeout must be > 0" in proc.stderr
    (tmp_path / "afile").write_text("x")
    proc = run_cli("part1", str(STARTERS["part1"]), "--keep", str(tmp_path / "afile"))
    assert proc.returncode == 2 and proc.stderr.strip().endswith("afile is a file, not a folder"), proc.stderr
    proc = run_cli("part1", str(STARTERS["part1"]), "--keep", str(tmp_path / "kept"))  # part 1 has no trace
    assert "part 1 runs no processes" in proc.stdout + proc.stderr and not (tmp_path / "kept").exists()


def test_a_file_that_does_not_import_fails_every_test_with_one_line(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def compute_bucket_assignment_by_size(:\n")
    proc, results = grade("part1", bad, tmp_path)
    assert proc.returncode == 1 and validate_results(results) == []
    assert proc.stderr.strip() == ("ddpsim.grade: error: could not import broken.py: "
                                   "SyntaxError: invalid syntax (broken.py, line 1)")
    assert all(t["output"].startswith("could not import broken.py") for t in results["tests"])


HUNG = '''
import os, time
import torch.distributed as dist
from torch import nn

def reducer_params(module):
    return [p for p in module.parameters() if p.requires_grad]

class BucketedDDP(nn.Module):
    def __init__(self, module, bucket_cap_mb=25.0, recorder=None, process_group=None):
        super().__init__()
        with open(os.path.join(os.environ["HUNG_PIDS"], f"{dist.get_rank()}-{os.getpid()}.pid"), "w") as f:
            f.write(str(os.getpid()))
        if dist.get_rank() == 1:
            time.sleep(3600)  # rank 1 hangs; rank 0 waits for it in the barrier below
        dist.barrier()
'''


@pytest.mark.slow
def test_a_hung_rank_is_stopped_and_no_process_is_left(tmp_path):
    student = tmp_path / "hung.py"
    student.write_text(HUNG)
    pids = tmp_path / "pids"
    pids.mkdir()
    start = time.monotonic()
    env = {**os.environ, "HUNG_PIDS": str(pids)}
    out = tmp_path / "hung.json"
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part2", str(student), "--json",
                           str(out), "--rank-timeout", "15"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert time.monotonic() - start < 90, "the hang was not stopped at --rank-timeout"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout
    results = json.loads(out.read_text())
    run_tests = [t for t in results["tests"] if "timed out after 15 s" in t["output"]]
    assert run_tests and all(t["score"] == 0 for t in run_tests), proc.stdout
    assert all(len(t["output"].splitlines()) == 1 for t in run_tests)
    # it said "timed out after 8 s (a rank hangs: waiting for a bucket that never launches?)": no rank, no line
    line = {w: next(i for i, t in enumerate(HUNG.splitlines(), 1) if w in t) for w in ("sleep", "dist.barrier")}
    assert all(f"rank 0 stuck in BucketedDDP(...) at hung.py:{line['dist.barrier']} (__init__: dist.barrier())" in t["output"]
               and f"rank 1 stuck in BucketedDDP(...) at hung.py:{line['sleep']} (__init__: time.sleep(3600))"
               in t["output"] for t in run_tests), proc.stdout
    ranks = [int(p.read_text()) for p in sorted(pids.glob("*.pid"))]
    # two 2-rank runs, each stopped: GradeNet's and the unused-parameter check's (UnusedNet)
    assert len(ranks) == 4 and not any(alive(pid) for pid in ranks), "a rank outlived the grader"


ABORTS = """import torch
import torch.distributed as dist
from torch import nn


def reducer_params(module):
    return [p for p in module.parameters() if p.requires_grad]


class BucketedDDP(nn.Module):
    def __init__(self, module, bucket_cap_mb=25.0, recorder=None, process_group=None):
        super().__init__()
        dist.all_reduce(torch.zeros(1000 if dist.get_rank() == 0 else 10))  # the ranks disagree on the size
"""


@pytest.mark.slow
def test_gloos_abort_text_comes_after_the_report_and_in_one_line_in_it(tmp_path):
    """A rank that gloo aborts (a collective mismatch) printed its C++ message on the grader's stderr as it died,
    above the report; the report said only "died from signal SIGABRT"."""
    (student := tmp_path / "aborts.py").write_text(ABORTS)
    out = tmp_path / "aborts.json"
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part2", str(student), "--json", str(out)],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=300)
    both, results = proc.stdout, json.loads(out.read_text())
    report, raw = both.index("ddpsim.grade part2: "), both.find("terminate called after throwing")
    assert 0 <= report < raw and "  total " in both[report:raw], both  # the raw text, whole, after the report
    failed = [t["output"] for t in results["tests"] if t["score"] < t["max_score"]]
    assert len(failed) == 9 and all("died from signal SIGABRT" in o and len(o.splitlines()) == 1 for o in failed), both
    assert all("on stderr it said: gloo::EnforceNotMet: [pair.cc:" in o for o in failed), failed[0]
    assert "terminate called after throwing" in results["output"]  # results.json keeps it too


def test_part2_given_another_parts_file_says_which_file_and_what_it_lacks(tmp_path):
    """Part 1's file given to part 2 failed every run check with "AttributeError: module 'ddpsim_student_part2'
    has no attribute 'BucketedDDP'", the grader's own module name, after starting ranks for nothing."""
    proc, results = grade("part2", STARTERS["part1"], tmp_path)
    why = ("buckets.py is not a part 2 file: it defines none of reducer_params, BucketedDDP (the names of "
           "bucketed_ddp.py); it looks like part 1's buckets.py")
    assert proc.stderr.strip() == f"ddpsim.grade: error: {why}", proc.stderr
    assert proc.returncode == 1 and all(t["output"] == why for t in results["tests"]), proc.stdout
    (half := tmp_path / "bucketed_ddp.py").write_text("def reducer_params(module):\n    return []\n")
    proc, results = grade("part2", half, tmp_path)  # one of the two names: graded, the other named where it is used
    outputs = {t["number"]: t["output"] for t in results["tests"]}
    assert "ddpsim_student" not in proc.stdout + proc.stderr and "error" not in proc.stderr, proc.stdout
    assert outputs["2.2"] == "bucketed_ddp.py defines no BucketedDDP (the class TODO 2-4 fill in)", proc.stdout


def test_the_unused_parameter_check_wants_only_the_unused_one_named():
    """2.10 passed a message naming every parameter (the index 4 is among them): it must name the one(s) that
    got no gradient, not list all."""
    from ddpsim.grade.core import load_file

    grader = load_file(A / "part2" / "autograder.py", "ddpsim_autograder_part2_names")
    names = grader.H.ddp_param_names(grader.H.UnusedNet())
    assert names[4] == "unused.weight" and len(names) == 7
    others = [n for n in names if n != "unused.weight"]
    for message, named in [("parameters [4] (indices in self.params) got no gradient", []),
                           ("['unused.weight'] got no gradient", []),
                           ("parameter 4 (rank 0 of 2, step 0) got no gradient", []),
                           ("gradients came for [0, 1, 2, 3, 5, 6], not for [4]", []),
                           ("parameters [0, 1, 2, 3, 4, 5, 6] got no gradient", others),
                           (f"no gradient: {names}", others),
                           ("params 0 1 2 3 4 5 6 may have no gradient", others),
                           ("missing: (4, 5)", ["head.weight"])]:
        assert grader._others_named(message, 4, "unused.weight", names) == named, message


# -- the harness's own overlap measurement, on hand-made stamps (times in ns) ----------------


def stamps(grads, collectives):
    return {"grads": [(t, i) for i, t in grads.items()], "collectives": collectives}


def test_analyse_counts_a_bucket_overlapped_when_a_gradient_lands_in_its_span():
    buckets, numels = [[3], [2], [0, 1]], [10, 20, 35, 40]  # sizes 40, 35, 30
    grads = {3: 100, 2: 200, 1: 300, 0: 400}
    good = analyse(stamps(grads, [(40, 110, 250), (35, 210, 350), (30, 410, 500)]), buckets, numels)
    assert good.sizes_ok and good.order == [0, 1, 2]
    assert (good.overlapped, good.could_overlap, good.launched_before_last_grad) == (2, 2, 2)
    waited = analyse(stamps(grads, [(40, 110, 150), (35, 210, 250), (30, 410, 500)]), buckets, numels)
    assert (waited.overlapped, waited.could_overlap) == (0, 2)
    late = analyse(stamps(grads, [(40, 410, 450), (35, 450, 480), (30, 480, 500)]), buckets, numels)
    assert (late.overlapped, late.launched_before_last_grad) == (0, 0)


def test_analyse_reads_order_and_boundaries_from_the_sizes_allreduced():
    buckets, numels = [[3], [2], [0, 1]], [10, 20, 35, 40]
    grads = {3: 100, 2: 200, 1: 300, 0: 400}
    swapped = analyse(stamps(grads, [(35, 110, 250), (40, 210, 350), (30, 410, 500)]), buckets, numels)
    assert swapped.sizes_ok and swapped.order == [1, 0, 2]
    split = analyse(stamps(grads, [(40, 110, 250), (35, 210, 350), (10, 410, 450), (20, 450, 500)]),
                    buckets, numels)
    assert not split.sizes_ok and split.order == [0, 1, None, None]
    extra = analyse(stamps(grads, [(1, 150, 350)] * 5), buckets, numels)  # dummy collectives
    assert not extra.sizes_ok and extra.overlapped == extra.could_overlap == 2  # capped


def test_analyse_in_order_launch_limits_what_could_overlap():
    # bucket 2 fills first but must wait for bucket 1, whose last gradient is the iteration's last
    buckets, numels = [[3], [2], [0]], [5, 1, 20, 40]
    grads = {0: 100, 3: 200, 2: 300}
    v = analyse(stamps(grads, [(40, 210, 350), (20, 310, 400), (5, 400, 450)]), buckets, numels)
    assert v.could_overlap == 1 and v.overlapped == 1  # bucket 0 only, though bucket 2 was full first


# -- the student release -----------------------------------------------------------------------
def test_release_leaves_every_instructor_file_out(tmp_path):
    from ddpsim.grade.release import INSTRUCTOR_ONLY, ReleaseError, release

    try:
        r = release(tmp_path / "course")
    except ReleaseError as e:
        pytest.skip(f"not the instructors' repository: {e}")
    assert r.left_out and all(not (r.outdir / p).exists() for p in r.left_out)
    for rel in r.copied:
        path = r.outdir / rel
        with open(path, "rb") as f:
            assert not f.readline().startswith(INSTRUCTOR_ONLY.encode()), rel
    assert not (r.outdir / "tests" / "instructor").exists()
    # the guide names part 3's answers: the students get assignments/README.md instead
    assert "assignments/INSTRUCTORS.md" in r.left_out and "assignments/README.md" in r.copied
    assert {str(p.relative_to(ROOT)) for p in STARTERS.values()} <= set(r.copied)
    proc = run_cli("part1", "assignments/part1/buckets.py", "--quiet", cwd=r.outdir)
    assert proc.returncode == 1 and proc.stdout.strip() == "part1: 0/28", proc.stdout + proc.stderr
    again = run_cli("release", str(tmp_path / "again"), cwd=r.outdir)
    assert again.returncode == 2 and "not a git checkout" in again.stderr


def test_release_refuses_a_folder_inside_the_repository_or_not_empty(tmp_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    proc = run_cli("release", str(tmp_path / "full"))
    assert proc.returncode == 2 and "exists and is not an empty folder" in proc.stderr
    proc = run_cli("release", "tests/somewhere")
    assert proc.returncode == 2 and "inside the repository" in proc.stderr
    assert not (ROOT / "tests" / "somewhere").exists()


def test_a_missing_function_is_named_with_the_students_file(tmp_path):
    # it read "AttributeError: module 'ddpsim_student_part1' has no attribute ... (at autograder.py:68)"
    from ddpsim.grade.core import describe_failure, load_file

    (tmp_path / "buckets.py").write_text("x = 1\n")
    module = load_file(tmp_path / "buckets.py", "ddpsim_student_missing")
    import json
    with pytest.raises(AttributeError) as other:  # an attribute missing elsewhere (torch, json) stays as it was
        json.no_such_function  # noqa: B018
    assert "json" in describe_failure(other.value) and "defines no" not in describe_failure(other.value)
    with pytest.raises(AttributeError) as e:
        module.compute_bucket_assignment_by_size  # noqa: B018
    assert describe_failure(e.value) == "buckets.py defines no compute_bucket_assignment_by_size"


def test_a_part1_solution_that_never_returns_is_stopped_within_minutes():
    """Part 1's tests each had the default 120 s limit: a `while` loop that never advanced (the whole
    grading of a correct solution takes under a second) held the grader for 9 x 120 s = 18 minutes."""
    from ddpsim.grade.core import collect_tests, load_file

    grader = load_file(A / "part1" / "autograder.py", "ddpsim_autograder_part1_limits")
    limits = [f.grade_timeout for f in collect_tests(grader)]
    assert sum(limits) <= 180, f"a hung part 1 solution would hold the grader {sum(limits):g} s"


@pytest.mark.slow
def test_a_part1_loop_that_never_ends_is_stopped_in_every_generated_test(tmp_path):
    """The time limit raised an Exception, which hypothesis took for a failure and ran the example again, with no
    limit left: an endless loop held the grader forever in the generated tests (1.6 to 1.9)."""
    tests = tmp_path / "tests"
    tests.mkdir()
    text = (A / "part1" / "autograder.py").read_text()
    assert "TIMEOUT = 15.0" in text
    (tests / "autograder.py").write_text(text.replace("TIMEOUT = 15.0", "TIMEOUT = 2.0"))  # 9 tests x 2 s
    solution = (ROOT / "tests" / "instructor" / "solutions" / "part1_buckets.py").read_text()
    head = "                                      tensor_indices=()):\n"
    assert head in solution
    hang = tmp_path / "buckets.py"
    hang.write_text(solution.replace(head, head + "    while True:\n        pass\n", 1))
    start = time.monotonic()
    proc, results = grade("part1", hang, tmp_path, "--tests", str(tests))
    assert time.monotonic() - start < 150, "the grader was held past its limits"
    timed_out = [t for t in results["tests"] if t["output"].startswith("timed out after 2 s (an infinite loop")]
    generated = [t for t in results["tests"] if "generated" in t["name"] or "dtypes" in t["name"]]
    assert generated and all(t in timed_out for t in generated), [t["output"][:80] for t in results["tests"]]
    assert proc.returncode == 1 and results["score"] < results["max_score"]


LEAVES_CHILDREN = """import multiprocessing, os, subprocess, sys, time
def _sleep():
    time.sleep(300)
if __name__ != "__mp_main__":  # a multiprocessing child that is not a daemon: Python waits for it at exit
    helper = multiprocessing.Process(target=_sleep)
    helper.start()
    shell = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    with open(os.environ["LEFT_PIDS"], "w") as f:
        f.write(f"{helper.pid} {shell.pid}")
def compute_bucket_assignment_by_size(tensors, limits, sparse=(), indices=()):
    return [list(range(len(tensors)))], [limits[0]]
"""


@pytest.mark.slow
def test_processes_a_solution_leaves_running_are_stopped_and_the_grader_exits(tmp_path):
    """A non-daemon multiprocessing child left running made the grader wait for it at exit after
    printing its table (forever, for a child that never ends), and a subprocess outlived it."""
    (student := tmp_path / "buckets.py").write_text(LEAVES_CHILDREN)
    env = {**os.environ, "LEFT_PIDS": str(pids := tmp_path / "pids")}
    out, err = tmp_path / "out.txt", tmp_path / "err.txt"  # files, not pipes: the children hold them
    with open(out, "w") as o, open(err, "w") as e:
        proc = subprocess.Popen([sys.executable, "-m", "ddpsim.grade", "part1", str(student), "--quiet"],
                                cwd=ROOT, env=env, stdout=o, stderr=e)
    try:
        proc.wait(timeout=90)
    finally:
        proc.kill()
        left = [int(p) for p in pids.read_text().split()] if pids.is_file() else []
        survived = [pid for pid in left if alive(pid)]
        for pid in survived:
            os.kill(pid, 9)
    out, err = out.read_text(), err.read_text()
    assert proc.returncode == 1 and out.strip().startswith("part1: "), out + err
    assert len(left) == 2 and "Traceback" not in err, err
    assert err.strip() == "ddpsim.grade: stopped 2 processes the graded code left running", err
    assert not survived, "a process the solution started outlived the grader"


def test_a_solution_that_prints_a_lot_keeps_each_tests_output_short(tmp_path):
    """Every print went into results.json: a part 1 solution printing its arguments on each call wrote
    a 4.7 MB results.json (hypothesis calls it hundreds of times)."""
    chatty = tmp_path / "buckets.py"
    chatty.write_text("def compute_bucket_assignment_by_size(tensors, limits, sparse=(), indices=()):\n"
                      "    print('debug ' * 500)\n"
                      "    return [list(range(len(tensors)))], [limits[0]]\n")
    _, results = grade("part1", chatty, tmp_path)
    assert validate_results(results) == []
    for t in results["tests"]:
        assert len(t["output"]) <= 5000, f"{t['name']}: {len(t['output'])} characters"
    assert any("more characters cut" in t["output"] for t in results["tests"])
