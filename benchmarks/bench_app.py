"""Benchmark the dashboard in a real headless Chromium (Debian's /usr/bin/chromium).

    python benchmarks/bench_app.py [--repeats 3] [--changes 4] [--out artifacts/bench_app.json]

Measures, per repeat, with a fresh Streamlit server each time:
- first render: from the server answering /_stcore/health (ready) to the Timeline
  page fully rendered in the browser (app idle, its figure loaded);
- what-if change: on the What-if page, from a click choosing another bucket ordering
  (a new, uncached configuration each time; real mouse events) to the new chart
  loaded and the app idle; then toggling find_unused_parameters on and off.
Targets: first render <= 3 s, what-if change <= 1 s, on this 2-core machine.
The 1-minute load average is printed with the results: the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/devtools.py: the headless-browser driver

from devtools import Browser, serve_app  # noqa: E402

ORDERS = ("reverse", "definition", "ready", "random")  # each a new, uncached configuration


def one_repeat(changes: int) -> dict:
    with Browser() as browser, serve_app() as (url, t_health, _):
        t0 = time.monotonic()
        browser.goto(url)
        browser.wait_rendered(min_images=1, timeout_s=60)
        first = time.monotonic() - t0
        browser.goto(url + "/whatif")
        state = browser.wait_rendered(min_images=2, timeout_s=60)
        uncached = []
        for order in ORDERS[:changes]:
            t = time.monotonic()
            browser.choose("Bucket ordering", order)
            state = browser.wait_rendered(min_images=2, changed_from=state["srcs"], timeout_s=30)
            uncached.append(time.monotonic() - t)
        toggles = []
        for _ in range(2):
            t = time.monotonic()
            browser.click_label("find_unused_parameters")
            state = browser.wait_rendered(min_images=2, changed_from=state["srcs"], timeout_s=30)
            toggles.append(time.monotonic() - t)
    return {"server_start_s": t_health, "first_render_s": first, "whatif_change_s": uncached,
            "whatif_toggle_s": toggles}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--changes", type=int, default=4, help="ordering changes per repeat (<= 4)")
    ap.add_argument("--out", default=str(Path(os.environ.get("DDPSIM_ARTIFACTS") or ROOT / "artifacts")
                                          / "bench_app.json"))
    args = ap.parse_args(argv)
    runs = []
    for i in range(args.repeats):
        runs.append(one_repeat(args.changes))
        r = runs[-1]
        print(f"repeat {i + 1}: server ready in {r['server_start_s']:.2f} s; first render "
              f"{r['first_render_s']:.2f} s; what-if changes "
              f"{', '.join(f'{x:.2f}' for x in r['whatif_change_s'])} s; toggles "
              f"{', '.join(f'{x:.2f}' for x in r['whatif_toggle_s'])} s; load {os.getloadavg()[0]:.1f}")
    firsts = [r["first_render_s"] for r in runs]
    changes = [x for r in runs for x in r["whatif_change_s"] + r["whatif_toggle_s"]]
    result = {"first_render_s": {"median": statistics.median(firsts), "max": max(firsts)},
              "whatif_change_s": {"median": statistics.median(changes), "max": max(changes)},
              "targets_s": {"first_render": 3.0, "whatif_change": 1.0},
              "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"first render: median {result['first_render_s']['median']:.2f} s, max "
          f"{result['first_render_s']['max']:.2f} s (target 3 s)")
    print(f"what-if change: median {result['whatif_change_s']['median']:.2f} s, max "
          f"{result['whatif_change_s']['max']:.2f} s (target 1 s)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
