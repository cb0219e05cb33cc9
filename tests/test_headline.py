"""What ``record`` and ``import`` print about the trace they wrote (ddpsim/cli/headline.py): the step
period beside the iteration time, and the one definition of the iteration time the app and the
docs give too."""
import json

import pytest

from conftest import ROOT
from ddpsim.analysis import summarize
from ddpsim.analysis.period import ITERATION_TIME, step_period_s
from ddpsim.cli.headline import headline_lines
from ddpsim.samples import BUNDLED_DIR
from ddpsim.trace import from_dict

SAMPLE = BUNDLED_DIR / "01_mlp_torch_default.json"  # 2 gloo ranks, steady iterations 1-4


def _later(d: dict, delta: int) -> None:
    """Every time (``*_ns``) in ``d`` and below, ``delta`` later."""
    for k, v in d.items():
        if k.endswith("_ns") and isinstance(v, int):
            d[k] = v + delta
        for x in (v if isinstance(v, list) else [v]):
            if isinstance(x, dict):
                _later(x, delta)


def spread(gap_ns: int):
    """The sample with ``gap_ns`` more between one iteration's end and the next one's start."""
    raw = json.loads(SAMPLE.read_text())
    for rank in raw["ranks"]:
        for it in rank["iterations"]:
            _later(it, it["iteration"] * gap_ns)
    return from_dict(raw)


def test_the_step_period_counts_the_time_between_steps_and_is_said_where_it_differs():
    base = spread(0)
    t = summarize(base)["iteration_time_s"]
    gap = int(t * 1e9)  # as much again between steps, as data loading can take
    slow = spread(gap)
    assert summarize(slow)["iteration_time_s"] == t  # the iteration time leaves it out
    assert step_period_s(slow) == pytest.approx(step_period_s(base) + gap * 1e-9)
    lines = headline_lines(slow, "wrote run.json")
    assert lines[0].startswith(f"wrote run.json; iteration {t * 1e3:.1f} ms, exposed comm ")
    said = f"step period {step_period_s(slow) * 1e3:.1f} ms (forward start to the next forward start, median): "
    assert lines[1].startswith(said) and "outside the iteration time" in lines[1]
    assert step_period_s(base) < 1.05 * t  # a recording that runs its steps back to back: no such line
    assert not any(line.startswith("step period") for line in headline_lines(base, "wrote run.json"))


def test_the_iteration_time_is_defined_alike_in_the_app_and_the_docs():
    from ddpsim.app.ui import METRIC_HELP

    assert ITERATION_TIME in METRIC_HELP["iteration_time_s"]
    assert ITERATION_TIME in " ".join((ROOT / "docs" / "usage.md").read_text().split())
