"""Part 3's course material against what the simulator really predicts (no solution needed): the
autograder's sweep learns the baseline as `validate` and the What-if page do, so it replays the
baseline's own run and tells the caps apart; a wrong choice is told how far off it is, not the
answer; the word limit is the one its message states; the starter names the API it imports."""
from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from ddpsim.analysis import summarize
from ddpsim.grade.core import load_file
from ddpsim.learn import learn
from ddpsim.trace import load_trace

PART3 = Path(__file__).resolve().parent.parent / "assignments" / "part3"


@pytest.fixture(scope="module")
def grader():
    return load_file(PART3 / "autograder.py", "ddpsim_autograder_part3_test")


@pytest.fixture(scope="module")
def rows(grader):
    return grader.reference_rows()


def test_the_sweep_replays_the_baseline_it_learns_from(grader, rows):
    """Learnt with workload_from_trace alone, the baseline had no allreduce latency (alpha 0): every
    candidate came out 61.2 ms, the baseline's own two buckets too, against 68.8 ms measured."""
    base = load_trace(grader.BASELINE)
    assert learn(base).link.alpha_s > 0, "the baseline's measured allreduce latency is not used"
    recorded = len(base.ranks[0].layouts[-1].buckets)
    same = [r for r in rows if r["bucket_cap_mb"] == 1]  # 1 MiB: the default's first bucket, so its layout
    assert same and same[0]["n_buckets"] == recorded
    measured = summarize(base)["iteration_time_s"]
    assert abs(same[0]["iteration_time_s"] / measured - 1) < 0.03, (same[0], measured)
    times = [r["iteration_time_s"] for r in rows]
    assert max(times) / min(times) > 1.03, "the sweep cannot tell the caps apart"


def test_a_wrong_choice_is_told_how_far_off_not_the_answer(grader, rows):
    best = min(rows, key=lambda r: r["iteration_time_s"])
    worst = max(rows, key=lambda r: r["iteration_time_s"])
    with pytest.raises(AssertionError) as e:
        grader.check_choice(rows, float(worst["bucket_cap_mb"]), "on this machine")
    message = str(e.value)
    slower = worst["iteration_time_s"] / best["iteration_time_s"] - 1
    assert f"{worst['bucket_cap_mb']:g} MiB" in message and f"{slower:.1%} slower" in message, message
    ties = [r for r in rows if r["iteration_time_s"] <= best["iteration_time_s"] * (1 + grader.TOLERANCE)]
    named = {float(c) for c in re.findall(r"(?<![\d.])(\d+(?:\.\d+)?) MiB", message)}
    assert named == {float(worst["bucket_cap_mb"])}, message  # the choice only, no candidate to take instead
    for r in ties:
        assert f"{r['iteration_time_s'] * 1e3:.1f} ms" not in message, message
    assert grader.check_choice(rows, float(best["bucket_cap_mb"]), "here").startswith("passed")


@pytest.mark.parametrize("words, passes", [(79, False), (80, True), (200, True), (201, False), (260, False)])
def test_the_word_limit_is_the_one_the_message_states(grader, words, passes):
    ctx = SimpleNamespace(student=SimpleNamespace(ANSWER=" ".join(["word"] * words)))
    if passes:
        assert grader.test_answer(ctx).startswith(f"passed: {words} words")
    else:
        with pytest.raises(AssertionError, match=fr"^ANSWER has {words} words \(counted as wc -w does\); write 80-200$"):
            grader.test_answer(ctx)


def dotted_names(text: str) -> set[str]:
    return set(re.findall(r"\bddpsim(?:\.\w+)+", text))


def test_the_starter_and_handout_name_the_sweep_the_starter_imports():
    """The starter imported ddpsim.learn.sweep while its TODO 1 said ddpsim.sim.sweep."""
    starter = (PART3 / "predict.py").read_text()
    imported = {f"{node.module}.{a.name}" for node in ast.walk(ast.parse(starter))
                if isinstance(node, ast.ImportFrom) and node.module for a in node.names}
    assert "ddpsim.learn.sweep" in imported
    named = {n for n in dotted_names(starter + (PART3 / "HANDOUT.md").read_text()) if n.endswith(".sweep")}
    assert named == {"ddpsim.learn.sweep"}, named


def test_words_are_counted_as_wc_counts_them(grader):
    """A regex split "don't", "gloo's" and "0.05-0.1" into several words: 190 words by wc failed as 210."""
    ctx = SimpleNamespace(student=SimpleNamespace(ANSWER=" ".join(["don't 0.05-0.1 ms/MiB gloo's"] * 50)))
    assert grader.test_answer(ctx).startswith("passed: 200 words")


def test_a_run_far_off_its_prediction_is_not_told_runs_differ_by_less(grader):
    """A run recorded at a load average of 8 on 2 cores measured 241.2 ms against 63.7 predicted (+279%),
    and the same line said launches differ "up to 2x under other jobs"."""
    measured, predicted = 0.2412, 0.0637
    message = grader.against_prediction(measured, predicted)
    assert "+279%" in message, message
    bounds = [float(x) for x in re.findall(r"up to (\d+(?:\.\d+)?)x", message)]
    assert all(measured / predicted <= b for b in bounds), message


WRONG_SHAPES = '''from ddpsim import load_trace
from ddpsim.grade import assignments_dir
from ddpsim.learn import sweep

CANDIDATES_MB = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 25]


def predict_sweep():
    rows = sweep(load_trace(assignments_dir() / "part3" / "baseline.json"), {"bucket_cap_mb": CANDIDATES_MB})
    return rows, min(rows, key=lambda r: r["iteration_time_s"])  # a tuple: the rows and the best


def choose_bucket_cap_mb():
    return 1, 2


def choose_link_cap_mb():
    return [0.1]


ANSWER = 120


def confirm(out_path):
    return None
'''


def test_a_function_that_returns_the_wrong_shape_is_told_what_it_returned(tmp_path):
    """A tuple where a list of rows was expected read "TypeError: list indices must be integers or slices, not
    str (at autograder.py:85)": the grader's own line, and nothing of what the function returned."""
    import json
    import subprocess
    import sys

    (student := tmp_path / "predict.py").write_text(WRONG_SHAPES)
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, "-m", "ddpsim.grade", "part3", str(student), "--json", str(out)],
                          cwd=PART3.parent.parent, capture_output=True, text=True, timeout=300)
    outputs = {t["number"]: t["output"] for t in json.loads(out.read_text())["tests"]}
    assert "autograder.py" not in proc.stdout and all(len(o.splitlines()) == 1 for o in outputs.values()), proc.stdout
    assert outputs["3.1"].startswith("predict_sweep() returned a tuple of 2 items (list, dict); expected a list of "
                                     "dicts, one per candidate cap"), outputs["3.1"]
    want = "expected one number: a candidate cap in MiB, one of [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 25]"
    assert outputs["3.2"] == f"choose_bucket_cap_mb() returned a tuple of 2 items (int, int); {want}"
    assert outputs["3.3"] == f"choose_link_cap_mb() returned a list of 1 item (float); {want}"
    assert outputs["3.4"] == "ANSWER is the int 120; expected a string: your written answer"


@pytest.mark.parametrize("returned, told", [
    ([[1, 0.06]] * 8, "predict_sweep() returned a list whose item 0 is a list of 2 items (int, float); expected a list"),
    ([{"bucket_cap_mb": 1, "iteration_time_s": "63 ms"}],
     "predict_sweep()'s row 0 has iteration_time_s = the str '63 ms'; expected a number"),
    ([{"bucket_cap_mb": c, "iteration_time_s": 0.06} for c in (1, 2, 5)],
     "predict_sweep() returned 3 rows, caps [1.0, 2.0, 5.0]; expected one row per candidate, 8 rows: [0.05, "),
])
def test_rows_of_the_wrong_shape_are_told_what_came_and_what_was_expected(grader, returned, told):
    ctx = SimpleNamespace(student=SimpleNamespace(predict_sweep=lambda: returned))
    with pytest.raises(AssertionError) as e:
        grader.test_sweep_rows(ctx)
    assert str(e.value).startswith(told) and len(str(e.value).splitlines()) == 1, str(e.value)
