"""Chrome Trace Event export: the shape Perfetto and chrome://tracing read."""
import json
import subprocess
import sys

from conftest import ROOT
from ddpsim import load_trace
from ddpsim.export import to_chrome

FIXTURE = "tests/fixtures/tiny_trace.json"


def test_export_layout_categories_and_args():
    trace = load_trace(ROOT / FIXTURE)
    events = to_chrome(trace)["traceEvents"]
    body = [e for e in events if e["ph"] != "M"]
    assert {e["pid"] for e in body} == {r.rank for r in trace.ranks}
    cats = {e["cat"] for e in body}
    assert {"forward", "backward", "optimizer", "allreduce", "grad_ready", "bucket_ready"} <= cats
    for e in body:
        if e["cat"] == "allreduce":
            assert e["ph"] == "X" and e["tid"] >= 1 and {"iteration", "bucket", "bytes"} <= set(e["args"])
        if e["cat"] in ("forward", "backward", "optimizer"):
            assert e["ph"] == "X" and e["tid"] == 0
        if e["cat"] == "grad_ready":
            assert e["ph"] == "i" and {"iteration", "param", "name", "bucket"} <= set(e["args"])


def test_timestamps_are_microseconds_on_one_base():
    trace = load_trace(ROOT / FIXTURE)
    events = to_chrome(trace)["traceEvents"]
    first = trace.ranks[1].iterations[0].forward
    fwd = next(e for e in events if e.get("cat") == "forward" and e["pid"] == trace.ranks[1].rank)
    assert fwd["ts"] == first.start_ns / 1000 and fwd["dur"] == first.duration_ns / 1000


def test_spans_on_one_track_nest():
    """Perfetto needs X events on one (pid, tid) to nest: no partial overlaps."""
    trace = load_trace(ROOT / FIXTURE)
    tracks = {}
    for e in to_chrome(trace)["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            assert s2 >= e1 or e2 <= e1, "overlapping spans must nest"


def test_cli_writes_json(tmp_path):
    out = tmp_path / "chrome.json"
    result = subprocess.run([sys.executable, "-m", "ddpsim", "export", "--chrome", FIXTURE, str(out)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["displayTimeUnit"] == "ms"
