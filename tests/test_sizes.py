"""Code people can pick up: modules of about 300 lines, functions of about 60.

Read with ``ast`` (a function's span runs from its ``def`` to its last line, docstring
included). Exceptions are listed with their reason; an exception that is no longer
needed fails the test, so the list only shrinks.
"""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddpsim"
MODULE_LINES = 300
FUNCTION_LINES = 60

MODULE_EXCEPTIONS = {
    # the step-for-step mirror of reducer.cpp: one file to read beside torch's
    "minddp/reducer.py": "mirrors reducer.cpp in one file",
    # every private or version-dependent torch API in one file, to check once per torch release
    "torchcompat.py": "the one place for torch's private APIs",
}


def lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_modules_are_short():
    long = {str(p.relative_to(PACKAGE)): lines(p) for p in PACKAGE.rglob("*.py")
            if lines(p) > MODULE_LINES}
    unexpected = {k: v for k, v in long.items() if k not in MODULE_EXCEPTIONS}
    assert not unexpected, f"modules over {MODULE_LINES} lines: {unexpected}"
    stale = [k for k in MODULE_EXCEPTIONS if k not in long]
    assert not stale, f"no longer over {MODULE_LINES} lines, drop the exception: {stale}"


def long_functions(folder: Path, base: Path = PACKAGE) -> dict[str, int]:
    out = {}
    for p in sorted(folder.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    out[f"{p.relative_to(base)}:{node.name}"] = n
    return out


def test_functions_are_short():
    long = long_functions(PACKAGE)
    assert not long, f"functions over {FUNCTION_LINES} lines: {long}"


def test_the_checker_sees_a_long_function(tmp_path):
    (tmp_path / "x.py").write_text("def f():\n" + "    x = 1\n" * FUNCTION_LINES + "\n\ndef g():\n    pass\n")
    assert long_functions(tmp_path, tmp_path) == {"x.py:f": FUNCTION_LINES + 1}
