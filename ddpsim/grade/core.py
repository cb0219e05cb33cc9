"""Load a part's autograder and a student's file, run the tests, score them."""
from __future__ import annotations

import importlib.util
import inspect
import io
import shutil
import signal
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

from ddpsim.grade.student import wrong_file
from ddpsim.grade.watch import rank_logs

PARTS = ("part1", "part2", "part3")
NOT_IMPLEMENTED = "not implemented"
IMPORT_TIMEOUT = 60.0  # s: importing the student's file takes longer than this -> every test fails
MAX_OUTPUT = 4000  # characters of one test's output kept (its message, then what the code printed)


def assignments_dir() -> Path:
    """The repository's ``assignments/`` folder (next to the ``ddpsim`` package)."""
    return Path(__file__).resolve().parents[2] / "assignments"


def points(weight: float, timeout: float = 120.0, name: str | None = None):
    """Decorator: a test worth ``weight`` points, failed if it runs longer than ``timeout`` s."""
    def mark(fn):
        fn.grade_points = float(weight)
        fn.grade_timeout = float(timeout)
        fn.grade_name = name or fn.__name__.removeprefix("test_").replace("_", " ")
        return fn
    return mark


@dataclass
class TestResult:
    name: str
    number: str
    score: float
    max_score: float
    output: str
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


@dataclass
class GradeResult:
    part: str
    student_file: str
    tests: list[TestResult] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None  # one line, when the student's file could not be graded at all
    kept: list = field(default_factory=list)  # the run's traces copied to grade(keep=...)
    logs: list = field(default_factory=list)  # (label, text): what ranks printed on stderr, shown after the report

    @property
    def score(self) -> float:
        return sum(t.score for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_score for t in self.tests)

    @property
    def passed(self) -> bool:
        return bool(self.tests) and all(t.passed for t in self.tests)

    def table(self) -> str:
        width = max((len(t.name) for t in self.tests), default=10)
        lines = [f"ddpsim.grade {self.part}: {self.student_file}"]
        if self.error:
            lines.append(f"  error: {self.error}; every test fails")
        for t in self.tests:
            mark = "PASS" if t.passed else "FAIL"
            lines.append(f"  {t.number:>4} {t.name:<{width}}  {t.score:>4g}/{t.max_score:<4g} {mark}")
            if not t.passed and not self.error:
                lines += [f"         {line}" for line in t.output.strip().splitlines()[:12]]
            elif t.passed and t.output.strip() != "passed":  # what a check measured: "passed: measured ..."
                lines += [f"         {line}" for line in t.output.strip().splitlines()[:3]]
        lines.append(f"  total {self.score:g}/{self.max_score:g} in {self.seconds:.1f} s")
        return "\n".join(lines)


class GradeContext:
    """What a test sees: the student module, its path, a scratch folder, shared results."""

    def __init__(self, student, path: Path, tmp: Path, rank_timeout: float = 90.0):
        self.student, self.path, self.tmp = student, path, tmp
        self.rank_timeout = rank_timeout  # s: a multi-process run is stopped (every rank) after this
        self._shared: dict[str, tuple[bool, object]] = {}

    def shared(self, key: str, compute):
        """``compute()`` once per grading; a failure is re-raised in every test that asks."""
        if key not in self._shared:
            try:
                self._shared[key] = (True, compute())
            except BaseException as e:  # noqa: BLE001 - re-raised below, per test
                if isinstance(e, KeyboardInterrupt):
                    raise
                self._shared[key] = (False, e)
        ok, value = self._shared[key]
        if not ok:
            raise value
        return value


STUDENT = "ddpsim_student_"  # the student's file is imported as this module name and the part's


class _Timeout(BaseException):
    """A test past its time limit. Not an Exception: hypothesis takes an Exception for a failure and runs the
    example again to report it, past the limit (an endless loop then held the grader forever)."""


def load_file(path: Path, name: str):
    """Import a Python file as a module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def describe_failure(e: BaseException) -> str:
    """One clear message: 'not implemented: ...' for a TODO left, else the error itself, with the input
    hypothesis found it on; of several failures (an ExceptionGroup), the first."""
    if isinstance(e, BaseExceptionGroup) and e.exceptions:
        more = len(e.exceptions) - 1
        return describe_failure(e.exceptions[0]) + (f" (and {more} other failure{'s' * (more > 1)})" if more else "")
    text = _not_implemented(e)
    if text is not None:
        return f"{NOT_IMPLEMENTED}: {text}"
    if isinstance(e, AssertionError):
        return str(e) or "assertion failed"
    if isinstance(e, _Timeout):
        return str(e)
    student = getattr(e, "obj", None) if isinstance(e, AttributeError) else None
    if str(getattr(student, "__name__", "")).startswith(STUDENT) and getattr(student, "__file__", None):
        return f"{Path(student.__file__).name} defines no {e.name}"  # the function asked for is not in the file
    if isinstance(e, SyntaxError):
        return f"{type(e).__name__}: {e.msg} ({Path(e.filename or '?').name}, line {e.lineno})"
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"{Path(f.filename).name}:{f.lineno}" for f in reversed(tb)
                  if not f.filename.startswith("<frozen")), "")
    example = next((" ".join(n.split()) for n in getattr(e, "__notes__", []) if n.startswith("Falsifying")), "")
    return f"{type(e).__name__}: {e}" + (f" (at {where})" if where else "") + (f"; {example}" if example else "")


def _not_implemented(e: BaseException) -> str | None:
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, NotImplementedError):
            return str(e) or "a TODO is left"
        text = getattr(e, "not_implemented", None)
        if text:
            return text
        e = e.__cause__ or e.__context__
    return None


def _run_one(fn, ctx: GradeContext, number: str) -> TestResult:
    weight = getattr(fn, "grade_points", 1.0)
    timeout = getattr(fn, "grade_timeout", 120.0)
    name = getattr(fn, "grade_name", fn.__name__)
    buf = io.StringIO()
    start = time.monotonic()
    try:
        with time_limit(timeout, "(an infinite loop or a hang?)"), redirect_stdout(buf):
            message = fn(ctx)
        score, output = weight, (message or "passed")
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - every failure is a failed test
        score, output = 0.0, describe_failure(e)
    printed = buf.getvalue().strip()
    if printed:
        output = f"{output}\n{printed}"
    if len(output) > MAX_OUTPUT:  # a solution that prints a lot: results.json stays small
        output = f"{output[:MAX_OUTPUT]}\n... ({len(output) - MAX_OUTPUT} more characters cut)"
    return TestResult(name, number, score, weight, output, time.monotonic() - start)


@contextmanager
def time_limit(seconds: float, why: str = ""):
    """Raise ``_Timeout`` in the main thread after ``seconds`` (no limit off the main thread)."""
    if not (hasattr(signal, "SIGALRM") and _main_thread()):
        yield
        return

    def on_alarm(signum, frame):
        raise _Timeout(f"timed out after {seconds:g} s {why}".strip())

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)  # then every second: code that swallows one is stopped
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def collect_tests(autograder) -> list:
    fns = [f for n, f in vars(autograder).items() if n.startswith("test_") and callable(f)]
    return sorted(fns, key=lambda f: inspect.getsourcelines(f)[1])


def grade(part: str, student_file: str | Path, tests_dir: str | Path | None = None,
          rank_timeout: float = 90.0, keep: str | Path | None = None) -> GradeResult:
    """Run ``part``'s autograder on ``student_file``; never raises for a student's error. ``keep``: a
    folder the run's traces (``*.json``, e.g. part 2's ``run.json``) are copied to, to open in the app."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}: choose one of {', '.join(PARTS)}")
    path = Path(student_file).resolve()
    folder = Path(tests_dir) if tests_dir else assignments_dir() / part
    autograder = load_file(folder / "autograder.py", f"ddpsim_autograder_{part}")
    tests = collect_tests(autograder)
    result = GradeResult(part, str(student_file))
    start = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"ddpsim-grade-{part}-"))
    try:
        try:
            with time_limit(IMPORT_TIMEOUT, "importing it (code at module level that never ends?)"):
                student = load_file(path, f"{STUDENT}{part}")
            why = wrong_file(part, student, path)  # e.g. part 1's file given to part 2
        except BaseException as e:  # noqa: BLE001 - a file that does not import fails every test
            if isinstance(e, KeyboardInterrupt):
                raise
            why = f"could not import {path.name}: {describe_failure(e)}"
        if why:
            result.error = why
            result.tests = [TestResult(getattr(f, "grade_name", f.__name__), f"{PARTS.index(part) + 1}.{i}",
                                       0.0, getattr(f, "grade_points", 1.0), why)
                            for i, f in enumerate(tests, 1)]
            return result
        ctx = GradeContext(student, path, tmp, rank_timeout)
        for i, fn in enumerate(tests, 1):
            result.tests.append(_run_one(fn, ctx, f"{PARTS.index(part) + 1}.{i}"))
    finally:
        result.seconds = time.monotonic() - start
        try:
            result.logs = rank_logs(tmp)
            found = sorted(tmp.glob("*.json")) if keep is not None else []
            if found:  # part 1 runs no processes: no folder made for nothing
                Path(keep).mkdir(parents=True, exist_ok=True)
                result.kept = [shutil.copy2(f, Path(keep) / f.name) for f in found]
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return result
