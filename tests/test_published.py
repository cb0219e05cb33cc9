"""``ddpsim published``: published GPU DDP measurements, the simulator's predictions from each
source's own 1-GPU baseline, and the errors it computes (never typed in)."""
import json

import pytest

from ddpsim.cli import main as cli
from ddpsim.experiments import published


def test_reproductions_are_computed_and_cited(capsys):
    assert cli(["published"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(out[-1])
    assert summary["predictions"] == sum(len(s["targets"]) for s in published.SOURCES) >= 2
    assert "github.com/pytorch/pytorch" in "\n".join(out) and "DeepLearningExamples" in "\n".join(out)
    rows, _ = published.run()
    for r in rows:
        assert r["rel_error"] == pytest.approx((r["predicted"] - r["published"]) / r["published"])
        if r["role"].startswith("baseline"):  # the only number learnt from each source
            assert r["predicted"] == pytest.approx(r["published"], rel=1e-3)
    pt = {r["world_size"]: r["predicted"] for r in rows if r["source"].startswith("PyTorch DDP")}
    assert pt[16] > pt[8] >= pt[1]  # 2 machines over InfiniBand: more exposed communication than NVLink
    assert summary["max_abs_error"] == pytest.approx(
        max(abs(r["rel_error"]) for r in rows if r["role"] == "prediction"))


def test_a_baseline_no_rate_can_give_is_one_line_error():
    src = dict(published.SOURCES[0], baseline=(1, 1e-9, "impossible"))
    with pytest.raises(ValueError, match="no GPU rate gives"):
        published.fit_tflops(src)
