"""The sidebar tells the bundled samples apart; the Compare page's milliseconds are the Timeline's (AppTest)."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ddpsim import samples

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
PAGES = "ddpsim/app/pages/"
SIM = "20_sim_resnet50_v100-eth25_w64_default"
FU = "23_sim_resnet50_v100-eth25_w64_find_unused"
VISIBLE = 32  # characters of a name the sidebar's chooser and its list show (Chromium, 1400 px): then they cut


@pytest.fixture(autouse=True)
def bundled(monkeypatch):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)


def opened(source: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90).run()
    at.selectbox(key="ddpsim_source").set_value(source).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    return at


def test_the_sidebar_tells_the_simulated_samples_apart():
    """The chooser showed "20 SIMULATED resnet50_v100-eth25" of 20-23 alike, cut before _default, _cap0.25,
    _cap100 and _find_unused: what tells them apart now comes first, and the open trace's full name is below."""
    at = opened(FU)
    box = at.selectbox(key="ddpsim_source")
    assert box.value == FU and len(box.options) == len(samples.list_samples())
    for label, shown in zip(samples.list_samples(), box.options):
        variant = label.split("_w64_")[1] if "_sim_" in label else label
        assert variant in shown[:VISIBLE] and (("SIMULATED" in shown) == ("_sim_" in label)), (label, shown)
    assert len({shown[:VISIBLE] for shown in box.options}) == len(box.options)
    assert "Open: 23 SIMULATED resnet50_v100-eth25_w64_find_unused" in [c.value for c in at.sidebar.caption]
    short = opened("01_mlp_torch_default")  # a name the chooser shows whole: nothing more said
    assert not [c.value for c in short.sidebar.caption if c.value.startswith("Open: ")]


def test_the_compare_table_shows_the_milliseconds_the_timeline_shows():
    """The Timeline showed 126.9 ms and 2.3 ms for the find_unused sample, the Compare table 126.87 and 2.32 (now 127.0 and 2.3)."""
    at = opened(FU)
    at.switch_page(PAGES + "timeline.py").run()
    shown = {m.label.split(",")[0]: m.value for m in at.metric}
    assert shown["Iteration time"] == "127.0 ms" and shown["Exposed communication"] == "2.3 ms", shown
    at.switch_page(PAGES + "compare.py").run()
    at.multiselect(key="ddpsim_compare_runs").set_value([FU, SIM]).run()
    assert not at.exception and not at.error
    row = at.dataframe[0].value.iloc[0]
    assert f"{row['iteration (ms, median)']} ms" == shown["Iteration time"]
    assert f"{row['exposed comm (ms, median)']} ms" == shown["Exposed communication"]
    assert row["iteration range (ms)"] == "127.0–127.0" and row["exposed range (ms)"] == "2.3–2.3"


def test_one_rule_for_milliseconds_beside_each_other():
    from ddpsim.app import units

    assert units.ms_digits() == 1 and units.ms_digits(0.0081, None) == 1 and units.ms_digits(0.0081, 0.0004) == 2
    assert units.ms_format(0.0081, 0.0004) == "{:.2f} ms" and units.ms_format() == "{:.1f} ms"
