"""The accuracy figure: every validation run of every result file as one point, and the
README's table is what the stored results give (docs/accuracy_figure.py)."""
import importlib.util
import json
import re

import pytest

from conftest import ROOT
from ddpsim.viz.accuracy import accuracy_points, error_summary, plot_accuracy

DOCS = ROOT / "docs"


def script():
    spec = importlib.util.spec_from_file_location("accuracy_figure", DOCS / "accuracy_figure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_points_from_each_kind_of_result():
    grid = {"rows": [{"predicted_ms": 110.0, "measured_ms": 100.0},
                     {"predicted_ms": float("nan"), "measured_ms": float("nan"), "error": "RuntimeError: x"}]}
    gpu = {"rows": [{"backward_measured_ms": 40.0, "backward_simulated_ms": 38.0}]}
    published = {"rows": [{"role": "baseline (fitted)", "published": 0.1, "predicted": 0.1, "unit": "s"},
                          {"role": "prediction", "published": 0.104, "predicted": 0.1, "unit": "s"},
                          {"role": "prediction", "published": 1000.0, "predicted": 800.0, "unit": "img/s",
                           "batch": 100, "world_size": 8}]}
    assert accuracy_points(grid) == [(100.0, 110.0)]  # the failed run is left out
    assert accuracy_points(gpu) == [(40.0, 38.0)]
    # as published (seconds as ms), so the error is the one `published` prints: 800/s is 20% slow, not 25%
    assert accuracy_points(published) == [(104.0, 100.0), (1000.0, 800.0)]
    sections = {"scaling": {"rows": [{"role": "prediction", "published": 2486.0, "predicted": 2533.0,
                                      "unit": "seq/s", "gpus": 8}]},
                "nccl": {"rows": [{"role": "fit", "published": 36.0, "predicted": 36.0},
                                  {"role": "prediction", "published": 5.7, "predicted": 6.0}]}}
    assert accuracy_points(sections, "scaling") == [(2486.0, 2533.0)]  # a throughput as published
    assert accuracy_points(sections, "nccl") == [(5.7, 6.0)]  # the fitted point is no prediction
    with pytest.raises(ValueError, match="section"):
        accuracy_points(sections, "ddp")
    assert error_summary([(100.0, 110.0), (40.0, 38.0)]) == pytest.approx((7.5, 10.0))
    with pytest.raises(ValueError, match="rows"):
        accuracy_points({"predictions": 6})


def test_every_point_is_drawn_with_its_check():
    checks = [("a", [(100.0, 110.0), (50.0, 45.0)]), ("b", [(2.0, 2.1)]), ("none", [])]
    fig = plot_accuracy(checks)
    ax = fig.axes[0]
    drawn = {c.get_gid(): c.get_offsets().tolist() for c in ax.collections if c.get_gid().startswith("accuracy:check")}
    assert drawn == {"accuracy:check:0": [[100.0, 110.0], [50.0, 45.0]], "accuracy:check:1": [[2.0, 2.1]]}
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "a: 2 runs, median |error| 10.0%, max 10.0%" in labels and "b: 1 runs, median |error| 5.0%, max 5.0%" in labels
    assert ax.get_xscale() == "log" and ax.get_xlim()[0] < 2.0 and ax.get_xlim()[1] > 110.0
    with pytest.raises(ValueError):
        plot_accuracy([("none", [])])


def test_the_stored_results_draw_the_figure_and_give_the_readme_table(tmp_path):
    figure = script()
    checks = figure.load_checks()
    stored = [(label, name) for label, name, _ in figure.RESULTS if (DOCS / "data" / figure._file(name)[0]).is_file()]
    assert {"gpucheck.json", "published.json"} <= {figure._file(name)[0] for _, name in stored}  # always kept
    assert [label for label, _, _ in checks] == [label for label, _ in stored]
    for (label, points, _), (_, name) in zip(checks, stored):
        file, section = figure._file(name)
        result = json.loads((DOCS / "data" / file).read_text())
        rows = (result[section] if section else result)["rows"]
        assert len(points) == sum(1 for r in rows if r.get("role", "prediction") == "prediction"
                                  and not r.get("error")), label
    assert figure.main(tmp_path / "accuracy.png") == 0
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the README's and docs/accuracy.md's tables are these rows, figure for figure
    rows = figure.table_rows(checks)
    for doc in (ROOT / "README.md", DOCS / "accuracy.md"):
        text = doc.read_text()
        assert all(row in text for row in rows), (doc.name, [r for r in rows if r not in text])
    assert re.search(r"!\[[^]]*\]\(docs/accuracy.png\)", (ROOT / "README.md").read_text())
