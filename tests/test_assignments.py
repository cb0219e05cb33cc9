"""The course module's self-check (assignments/): the reference solutions pass every
autograder test, the untouched starter files fail every test with a clear
"not implemented" message (no crash), and the grade command's JSON output follows the
Gradescope results.json schema."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ddpsim.grade import validate_results

ROOT = Path(__file__).resolve().parent.parent
A = ROOT / "assignments"
PARTS = {
    "part1": (A / "part1" / "buckets.py", A / "solutions" / "part1_buckets.py"),
    "part2": (A / "part2" / "bucketed_ddp.py", A / "solutions" / "part2_bucketed_ddp.py"),
    "part3": (A / "part3" / "predict.py", A / "solutions" / "part3_predict.py"),
}


def grade(part: str, student: Path, tmp_path: Path) -> tuple[int, dict, str]:
    out = tmp_path / f"{part}-{student.stem}.json"
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", part, str(student), "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert out.is_file(), f"no results JSON written\n{proc.stdout}\n{proc.stderr}"
    return proc.returncode, json.loads(out.read_text()), proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("part", sorted(PARTS))
def test_reference_solution_passes(part, tmp_path):
    rc, results, stdout = grade(part, PARTS[part][1], tmp_path)
    assert validate_results(results) == []
    failed = [t for t in results["tests"] if t["score"] < t["max_score"]]
    assert not failed, stdout
    assert rc == 0 and results["score"] == sum(t["max_score"] for t in results["tests"])
    print(stdout)


@pytest.mark.slow
@pytest.mark.parametrize("part", sorted(PARTS))
def test_starter_fails_with_not_implemented(part, tmp_path):
    rc, results, stdout = grade(part, PARTS[part][0], tmp_path)
    assert validate_results(results) == []
    assert rc == 1 and results["score"] == 0, stdout
    for t in results["tests"]:
        assert t["status"] == "failed" and t["score"] == 0
        assert t["output"].startswith("not implemented: "), f"{t['name']}: {t['output']}"


def test_reference_solutions_are_kept_apart_from_starters():
    for starter, solution in PARTS.values():
        assert starter.parent != solution.parent
        assert "NotImplementedError" in starter.read_text()
        assert "NotImplementedError" not in solution.read_text()
    for part in PARTS:
        assert (A / part / "HANDOUT.md").is_file() and (A / part / "autograder.py").is_file()
    assert (A / "INSTRUCTORS.md").is_file()


def test_validate_results_catches_bad_json():
    good = {"score": 1.0, "tests": [{"name": "a", "score": 1.0, "max_score": 1.0, "output": "ok"}]}
    assert validate_results(good) == []
    assert validate_results({"score": 2.0, "tests": good["tests"]})  # score != sum
    assert validate_results({"score": 1.0, "tests": [{"name": "a", "score": 2, "max_score": 1,
                                                      "output": ""}]})
    assert validate_results({"tests": []})


def test_grade_command_usage_errors(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part9", "x.py"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "invalid choice" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part1", str(tmp_path / "missing.py")],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_a_file_that_does_not_import_fails_every_test_cleanly(tmp_path):
    bad = tmp_path / "broken.py"
    bad.write_text("def compute_bucket_assignment_by_size(:\n")
    rc, results, _ = grade("part1", bad, tmp_path)
    assert rc == 1 and validate_results(results) == []
    assert all(t["output"].startswith("could not import broken.py") for t in results["tests"])
