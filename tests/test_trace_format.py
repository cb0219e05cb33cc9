"""The trace format: loading, round trips, and clear errors on bad files."""
import json

import pytest

from ddpsim import TraceFormatError, load_trace, parse_trace

FIXTURE = "tests/fixtures/tiny_trace.json"


def test_fixture_loads_into_typed_objects():
    trace = load_trace(FIXTURE)
    assert trace.source in ("real", "simulated")
    rank = trace.ranks[0]
    assert rank.iterations[0].forward.end_ns >= rank.iterations[0].forward.start_ns
    assert rank.layout_at(0).buckets, "iteration 0 has a layout"


def test_round_trip_is_lossless(tmp_path):
    trace = load_trace(FIXTURE)
    trace.save(tmp_path / "copy.json")
    assert load_trace(tmp_path / "copy.json") == trace


@pytest.mark.parametrize("mangle, expected", [
    (lambda s: s[: len(s) // 2], "truncated"),
    (lambda s: s.replace('"ranks"', '"ranks" oops', 1), "not valid JSON"),
    (lambda s: "", "empty"),
    (lambda s: json.dumps({"format": "ddpsim-trace", "version": 99}), "version 99"),
    (lambda s: json.dumps({"hello": "world"}), "not a ddpsim trace"),
    (lambda s: s.replace('"forward"', '"forwards"', 1), "missing field ranks[0].iterations[0].forward"),
    (lambda s: s.replace('"source":"real"', '"source":"guess"').replace('"source": "real"', '"source": "guess"'),
     "source must be"),
])
def test_bad_files_raise_one_line_trace_format_error(tmp_path, mangle, expected):
    text = open(FIXTURE).read()
    text = json.dumps(json.loads(text), separators=(",", ":")) if expected != "truncated" else text
    bad = tmp_path / "bad.json"
    bad.write_text(mangle(text))
    with pytest.raises(TraceFormatError) as err:
        load_trace(bad)
    message = str(err.value)
    assert expected in message and "\n" not in message


def test_wrong_type_names_the_field():
    raw = json.loads(open(FIXTURE).read())
    raw["ranks"][0]["iterations"][0]["buckets"][0]["bytes"] = "lots"
    with pytest.raises(TraceFormatError, match=r"ranks\[0\]\.iterations\[0\]\.buckets\[0\]\.bytes"):
        parse_trace(json.dumps(raw))


def test_binary_upload_is_rejected_cleanly():
    with pytest.raises(TraceFormatError, match="not UTF-8"):
        parse_trace(b"\xff\xfe\x00garbage")


@pytest.mark.parametrize("tail", ['\\"' * 40_000, '\\"' * 40_000 + "\\", 'ok", "b": "\\\\\\"x'])
def test_a_file_that_ends_inside_a_string_of_escapes_is_truncated(tmp_path, tail):
    """The pre-scan matches an unterminated string once, to the end (it used to retry at every
    escaped quote: quadratic, 13 s for 40,000 of them; benchmarks/bench_reader.py times it)."""
    path = tmp_path / "q.json"
    path.write_text('{"meta": {"model": "' + tail)
    with pytest.raises(TraceFormatError, match="is truncated"):
        load_trace(path)
