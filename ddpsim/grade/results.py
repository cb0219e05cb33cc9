"""The Gradescope ``results.json`` of a grading (``ddpsim.grade.core.GradeResult``), and its check."""
from __future__ import annotations

MAX_LOG = 4000  # characters of what the ranks printed on stderr kept in results.json


def results_json(result) -> dict:
    """The Gradescope ``results.json`` shape (extra keys are ignored by Gradescope)."""
    return {
        "score": round(result.score, 4),
        "max_score": round(result.max_score, 4),
        "execution_time": round(result.seconds, 2),
        "output": f"{result.part}: {result.score:g}/{result.max_score:g} points" + rank_output(result.logs),
        "visibility": "visible",
        "stdout_visibility": "visible",
        "tests": [{"name": t.name, "number": t.number, "score": round(t.score, 4),
                   "max_score": round(t.max_score, 4), "status": "passed" if t.passed else "failed",
                   "output": t.output, "visibility": "visible"} for t in result.tests],
    }


def validate_results(data: dict) -> list[str]:
    """Problems with a results dict against the Gradescope schema; [] when valid."""
    problems = []
    num = (int, float)
    if not isinstance(data, dict):
        return ["results must be a JSON object"]
    if not isinstance(data.get("score"), num) or isinstance(data.get("score"), bool):
        problems.append("top-level 'score' must be a number")
    tests = data.get("tests")
    if not isinstance(tests, list) or not tests:
        return problems + ["'tests' must be a non-empty list"]
    for i, t in enumerate(tests):
        for key, typ in (("name", str), ("output", str), ("score", num), ("max_score", num)):
            if not isinstance(t.get(key), typ) or isinstance(t.get(key), bool):
                problems.append(f"tests[{i}].{key} must be {'a string' if typ is str else 'a number'}")
        if isinstance(t.get("score"), num) and isinstance(t.get("max_score"), num) \
                and not 0 <= t["score"] <= t["max_score"]:
            problems.append(f"tests[{i}].score must be within 0..max_score")
        if t.get("status") not in (None, "passed", "failed"):
            problems.append(f"tests[{i}].status must be 'passed' or 'failed'")
    if isinstance(data.get("score"), num) and all(isinstance(t.get("score"), num) for t in tests):
        if abs(sum(t["score"] for t in tests) - data["score"]) > 1e-6:
            problems.append("top-level score must equal the sum of the tests' scores")
    return problems


def rank_output(logs: list[tuple[str, str]], limit: int = MAX_LOG) -> str:
    """What the ranks printed on stderr (``GradeResult.logs``), for after the report: "" if nothing."""
    if not logs:
        return ""
    text = "".join(f"--- {label} ---\n{body.rstrip()}\n" for label, body in logs)
    cut = f"\n... ({len(text) - limit} more characters cut)" if len(text) > limit else ""
    return "\n\nwhat the ranks printed on stderr, after the report above:\n" + text[:limit] + cut
