"""ddpsim.grade: the autograder of the course module in ``assignments/``.

    python -m ddpsim.grade part1 path/to/buckets.py [--json results.json]
    python -m ddpsim.grade release OUTDIR     # the students' copy, without solutions (release.py)

Each part's tests live in ``assignments/partN/autograder.py``: plain functions
``test_*(ctx)`` (run in the order they are defined), each with a weight set by
``@points(n)``. ``ctx.student`` is the student's file imported as a module,
``ctx.path`` its path, ``ctx.tmp`` a scratch folder, and ``ctx.shared(name, fn)``
computes an expensive result once (a real multi-process run) for several tests.

A test passes when it returns; it fails with the exception's message. A
``NotImplementedError`` anywhere (also inside a spawned rank) is reported as
``not implemented: <message>``, so an untouched starter file gets one clear line
per test, never a traceback. The results print as a per-test score table and can
be written in the JSON format Gradescope reads (``results.json``)::

    {"score": 17.0, "max_score": 30.0, "execution_time": 12.3, "output": "...",
     "tests": [{"name": "...", "number": "1.1", "score": 5.0, "max_score": 5.0,
                "status": "passed", "output": "..."}, ...]}
"""
from ddpsim.grade.core import GradeResult, TestResult, assignments_dir, grade, points
from ddpsim.grade.results import results_json, validate_results

__all__ = ["grade", "points", "results_json", "validate_results", "assignments_dir",
           "GradeResult", "TestResult"]
