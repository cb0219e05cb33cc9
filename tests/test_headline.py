"""What ``record`` and ``import`` print about the trace they wrote (ddpsim/cli/headline.py): the time
between steps beside the iteration time, and the one definition of the iteration time the app and the
docs give too."""
import json

import pytest

from conftest import ROOT
from ddpsim.analysis import summarize
from ddpsim.analysis.period import ITERATION_TIME, between_steps_s
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


def spread(gap_ns: int, sample=SAMPLE, edit=lambda raw: raw):
    """The sample (``edit``-ed) with ``gap_ns`` more between one iteration's end and the next one's start."""
    raw = edit(json.loads(sample.read_text()))
    for rank in raw["ranks"]:
        for it in rank["iterations"]:
            _later(it, it["iteration"] * gap_ns)
    return from_dict(raw)


def test_the_time_between_steps_is_counted_and_said_where_it_is_much():
    base = spread(0)
    t = summarize(base)["iteration_time_s"]
    gap = int(t * 1e9)  # as much again between steps, as data loading can take
    slow = spread(gap)
    assert summarize(slow)["iteration_time_s"] == t  # the iteration time leaves it out
    assert between_steps_s(slow) == pytest.approx(between_steps_s(base) + gap * 1e-9)
    lines = headline_lines(slow, "wrote run.json")
    assert lines[0].startswith(f"wrote run.json; iteration {t * 1e3:.1f} ms, exposed comm ")
    said = f"between steps {between_steps_s(slow) * 1e3:.1f} ms (median, after each step's end and before the next forward)"
    assert lines[1].startswith(said) and "outside the iteration time" in lines[1]
    assert between_steps_s(base) < 0.05 * t  # a recording that runs its steps back to back: no such line
    assert not any(line.startswith("between steps") for line in headline_lines(base, "wrote run.json"))


def test_a_no_sync_cycle_leaves_out_the_time_between_its_micro_steps_too():
    """A cycle of 3 micro-steps counted the time between them, and a synced step not the time after it:
    the same gap made a no_sync run slower per micro-step (Note [The time between steps is left out])."""
    no_sync = BUNDLED_DIR / "05_convnet_torch_no_sync3.json"  # a sync every 3 micro-steps
    base, slow = spread(0, no_sync), spread(50_000_000, no_sync)  # one steady cycle: its own gaps
    assert summarize(slow)["iteration_time_s"] == pytest.approx(summarize(base)["iteration_time_s"])
    assert between_steps_s(slow) == pytest.approx(between_steps_s(base) + 0.05)
    assert any(line.startswith("between steps") for line in headline_lines(slow, "wrote run.json"))
    base, slow = spread(0, edit=sync_every_2), spread(50_000_000, edit=sync_every_2)  # two steady cycles
    assert summarize(slow)["iteration_time_s"] == pytest.approx(summarize(base)["iteration_time_s"])
    assert between_steps_s(slow) == pytest.approx(between_steps_s(base) + 0.05)  # per micro-step, as before


def sync_every_2(raw: dict) -> dict:
    """``raw`` (the MLP sample) with its iterations 1 and 3 accumulated (no allreduce, no optimizer):
    cycles [0], [1, 2], [3, 4], the last two steady."""
    for rank in raw["ranks"]:
        for it in rank["iterations"]:
            if it["iteration"] in (1, 3):
                it.update(sync=False, buckets=[], optimizer=None)
    return raw


def test_the_time_between_steps_is_each_pairs_own_gap():
    """The step period was a median over pairs beside an iteration time over all iterations: two sets, so
    a run with gaps of 0.67, -0.07 and -0.36 ms was told 3.5 ms of each step lay between steps."""
    for name in ("08_branchy_minddp_find_unused.json", "06_transformer_torch_default.json"):
        trace = from_dict(json.loads((BUNDLED_DIR / name).read_text()))
        gap = between_steps_s(trace)
        assert gap is not None and gap < 0.05 * summarize(trace)["iteration_time_s"], (name, gap)
        assert not any(line.startswith("between steps") for line in headline_lines(trace, "wrote run.json"))


def test_the_iteration_time_is_defined_alike_in_the_app_and_the_docs():
    from ddpsim.app.ui import METRIC_HELP

    assert ITERATION_TIME in METRIC_HELP["iteration_time_s"]
    assert ITERATION_TIME in " ".join((ROOT / "docs" / "usage.md").read_text().split())


def test_no_synced_step_is_explained_by_where_the_trace_came_from():
    """An import marks a step synced only where the profile shows an allreduce: "every step accumulated
    under no_sync" guessed a cause the profile never showed."""
    raw = json.loads(SAMPLE.read_text())
    for rank in raw["ranks"]:
        for it in rank["iterations"]:
            it["sync"], it["buckets"] = False, []
    recorded = headline_lines(from_dict(raw), "wrote run.json")
    raw["meta"]["source_format"] = "kineto"
    imported = headline_lines(from_dict(raw), "wrote run.json")
    assert "every step accumulated under no_sync" in recorded[0]
    assert "the profile shows no allreduce in any step" in imported[0]


def test_a_no_sync_run_says_micro_step_as_simulate_does():
    """record printed 'iteration 4.3 ms' where simulate said 'micro-step (a sync every 2; ...) 4.248 ms'
    for the same figure: both now word it as simulate does (ddpsim/cli/summary_text.py)."""
    from ddpsim.trace import load_trace

    trace = load_trace(BUNDLED_DIR / "05_convnet_torch_no_sync3.json")
    t = summarize(trace)["iteration_time_s"]
    line = headline_lines(trace, "wrote run.json")[0]
    assert line.startswith(f"wrote run.json; micro-step (a sync every 3; the times are per micro-step) {t * 1e3:.1f} ms, ")
