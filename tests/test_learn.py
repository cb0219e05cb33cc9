"""The Learn page: every topic's figure draws from the bundled samples, every reference resolves."""
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ddpsim import samples
from ddpsim.app import learn

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "ddpsim" / "app" / "pages" / "learn.py"


def all_text() -> str:
    return "\n".join(t.text for t in learn.TOPICS.values()) + learn.CPU_NOTE + learn.WHATIF_CPU_NOTE + PAGE.read_text()


def test_every_repository_reference_exists():
    paths = set(re.findall(r"`((?:docs|ddpsim|notebooks|assignments|tests)/[^`\s]+)`", all_text()))
    assert paths, "the Learn page names where to read more"
    assert [p for p in paths if not (ROOT / p).exists()] == []
    assert "shared notes" not in all_text()
    for sample, *_ in learn.FIGURES.values():
        if isinstance(sample, dict):  # a simulation drawn live, not a sample
            continue
        for s in (sample,) if isinstance(sample, str) else sample:
            assert (samples.BUNDLED_DIR / f"{s}.json").is_file(), s


def test_the_what_if_cpu_note_quotes_the_bundled_mlp_runs():
    """The What-if page's caption on a CPU recording quotes two real runs: they are the bundled samples' medians."""
    from ddpsim.analysis import steady_summary
    from ddpsim.trace import load_trace

    ms = [steady_summary(load_trace(samples.sample_path(s)))["iteration_time_s"] * 1e3
          for s in ("01_mlp_torch_default", "02_mlp_torch_cap0.25")]
    assert f"{ms[0]:.1f} ms at torch's default cap, {ms[1]:.1f} ms at 0.25 MiB" in learn.WHATIF_CPU_NOTE


@pytest.mark.parametrize("name", sorted(learn.FIGURES))
def test_topic_figure_draws(name):
    fig = learn.figure(name)
    assert fig.axes and fig.axes[0].has_data()


def test_learn_page_shows_the_figures(monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(ROOT / "tests" / "fixtures"))  # figures use bundled ones
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120).run()
    at.switch_page("ddpsim/app/pages/learn.py").run()
    assert not at.exception and not at.error and not at.warning
    assert len(at.image) == len(learn.FIGURES) + 1  # + the DataParallel section's (tests/test_dataparallel.py)
