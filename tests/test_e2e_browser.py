"""End to end in a real headless Chromium: the served app renders, and the What-if page reacts.

Needs Debian's ``chromium`` (/usr/bin/chromium); driven over the DevTools protocol with
the ``websockets`` package Streamlit already installs (tests/devtools.py). Screenshots
go to $DDPSIM_ARTIFACTS, else artifacts/ at the repository root (git-ignored); the README's
screenshot, docs/dashboard.png, is taken here on every run, so it shows the dashboard as it is.
"""
import os
from pathlib import Path

import pytest

from devtools import CHROMIUM, Browser, group_alive, serve_app

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("DDPSIM_ARTIFACTS") or ROOT / "artifacts")
README_SHOT = ROOT / "docs" / "dashboard.png"  # README.md shows it
GPU_SAMPLE = "10_h100_resnet18_gloo_2ranks"  # a real H100 run, imported from its profiles

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                reason=f"{CHROMIUM} is missing: apt-get install chromium")


@pytest.fixture
def server(tmp_path):
    env = {"DDPSIM_RUNS_DIR": str(tmp_path / "runs")}
    env.pop("DDPSIM_SAMPLES_DIR", None)
    with serve_app(env=env) as (url, _, proc):
        yield url, proc
    assert group_alive(proc.pid) == [], "the Streamlit server left processes behind"


@pytest.fixture
def browser():
    b = Browser()
    yield b
    b.close()
    assert group_alive(b.proc.pid) == [], "chromium left processes behind"


@pytest.mark.slow  # a real browser on a real Streamlit server
def test_whatif_switch_configuration_renders_chart(server, browser):
    url, _ = server
    browser.goto(url)
    first = browser.wait_rendered(min_images=1, timeout_s=40)
    assert "Timeline" in browser.eval("document.body.innerText")
    browser.screenshot(ARTIFACTS / "e2e_timeline.png", height=1500)

    browser.goto(url + "/whatif")
    shown = browser.wait_rendered(min_images=3, timeout_s=40)  # the timelines, the sweep and the scaling curve
    assert shown["srcs"] != first["srcs"]
    browser.click_label("find_unused_parameters")  # switch a configuration
    changed = browser.wait_rendered(min_images=2, changed_from=shown["srcs"], timeout_s=30)
    assert changed["srcs"][0] != shown["srcs"][0]  # a new simulated timeline
    chosen = browser.eval("Array.from(document.querySelectorAll('[data-testid=stSelectbox] input')).map(i => i.value)")
    assert "none (DDP's own allreduce)" in chosen, chosen  # the hook selector keeps its choice, not "Choose an option"
    for hook in ("fp16", "none (DDP's own allreduce)"):  # back to none: a None option offered "Clear value"
        before = browser.state()["srcs"]
        browser.choose("Communication hook", hook)
        changed = browser.wait_rendered(min_images=2, changed_from=before, timeout_s=30)
    buttons = browser.eval("[...document.querySelectorAll('[data-testid=stSelectbox]')].filter(s => s.innerText"
                           ".includes('Communication hook')).map(s => s.innerHTML).join('')")
    assert "Clear value" not in buttons and "none (DDP's own allreduce)" in buttons
    browser.click_label("a GPU model")  # the GPU example, where bucket size matters ~2x
    gpu = browser.wait_rendered(min_images=3, changed_from=changed["srcs"], timeout_s=40)
    text = browser.eval("document.body.innerText")
    assert "Best simulated" in text and "the same as the configuration unchanged" in text, text[-3000:]
    assert "from 1 to 100,000 ranks the iteration goes from" in text, text[-3000:]  # the scaling curve's caption
    assert gpu["images"] == 3
    shot = browser.screenshot(ARTIFACTS / "e2e_whatif.png", height=3400)
    assert shot.stat().st_size > 10_000


@pytest.mark.slow  # a real browser on a real Streamlit server
def test_timeline_of_a_real_gpu_run_is_the_readme_screenshot(server, browser):
    url, _ = server
    browser.goto(url)
    first = browser.wait_rendered(min_images=1, timeout_s=40)
    browser.choose("Trace", GPU_SAMPLE)
    shown = browser.wait_rendered(min_images=1, changed_from=first["srcs"], timeout_s=40)
    text = browser.eval("document.body.innerText")
    assert "Timeline" in text and "Times here are the GPU's" in text, text[-2000:]  # the GPU clock's note
    assert shown["images"] == 1
    shot = browser.screenshot(README_SHOT, height=1250)  # both ranks
    assert shot.stat().st_size > 10_000
