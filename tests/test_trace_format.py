"""The trace format: loading, round trips, and clear errors on bad files."""
import json
from pathlib import Path

import pytest

from ddpsim import TraceFormatError, load_trace, parse_trace, save_trace

FIXTURE = "tests/fixtures/tiny_trace.json"
ROOT = Path(__file__).resolve().parents[1]


def test_fixture_loads_into_typed_objects():
    trace = load_trace(FIXTURE)
    assert trace.source in ("real", "simulated")
    rank = trace.ranks[0]
    assert rank.iterations[0].forward.end_ns >= rank.iterations[0].forward.start_ns
    assert rank.layout_at(0).buckets, "iteration 0 has a layout"


def test_a_rank_finds_its_iterations_by_number_as_the_list_changes(tmp_path):
    """RankTrace.iteration answers from an index (a search per call made reading a trace quadratic in its
    length): the first iteration so numbered, None for one not recorded, and right again after the list
    grows or is replaced; the index is no field, so it is never written or compared."""
    import copy

    trace = load_trace(FIXTURE)
    rank = trace.ranks[0]
    first = rank.iterations[0]
    assert rank.iteration(first.iteration) is first and rank.iteration(10**6) is None
    extra = copy.deepcopy(rank.iterations[-1])
    extra.iteration = 10**6
    rank.iterations.append(extra)  # grown
    assert rank.iteration(10**6) is extra
    rank.iterations.append(copy.deepcopy(extra))  # a second under that number: the first still answers
    assert rank.iteration(10**6) is extra
    rank.iterations = rank.iterations[1:-1]  # replaced
    assert rank.iteration(first.iteration) is None and rank.iteration(10**6) is extra
    save_trace(trace, tmp_path / "t.json")
    assert "_by_number" not in (tmp_path / "t.json").read_text() and copy.deepcopy(trace) == trace


def test_round_trip_is_lossless(tmp_path):
    trace = load_trace(FIXTURE)
    save_trace(trace, tmp_path / "copy.json")
    assert load_trace(tmp_path / "copy.json") == trace


def test_host_times_are_written_only_where_the_times_are_the_gpus(tmp_path):
    trace = load_trace(FIXTURE)  # a CPU recording: no host times beside its own
    save_trace(trace, tmp_path / "copy.json")
    it = json.loads((tmp_path / "copy.json").read_text())["ranks"][0]["iterations"][0]
    assert not any(k in b for b in it["buckets"] for k in ("cpu_launch_ns", "cpu_complete_ns"))
    assert not any("cpu_t_ns" in g for g in it["grad_ready"])
    gpu = load_trace(ROOT / "ddpsim" / "samples" / "10_h100_resnet18_gloo_2ranks.json")  # GPU times: host ones too
    assert any(g.cpu_t_ns is not None for g in gpu.ranks[0].iterations[0].grad_ready)
    assert any("cpu_t_ns" in g for g in gpu.to_dict()["ranks"][0]["iterations"][0]["grad_ready"])


def test_the_backwards_cpu_time_round_trips_and_is_written_only_where_measured(tmp_path):
    d = json.loads(Path(FIXTURE).read_text())
    its = d["ranks"][0]["iterations"]
    its[0]["backward_cpu_ns"] = 1_234_567  # Note [The backward's compute alone]
    (tmp_path / "cpu.json").write_text(json.dumps(d))
    trace = load_trace(tmp_path / "cpu.json")
    assert trace.ranks[0].iterations[0].backward_cpu_ns == 1_234_567
    assert all(it.backward_cpu_ns is None for it in trace.ranks[0].iterations[1:])
    save_trace(trace, tmp_path / "copy.json")
    written = json.loads((tmp_path / "copy.json").read_text())["ranks"][0]["iterations"]
    assert written[0]["backward_cpu_ns"] == 1_234_567 and not any("backward_cpu_ns" in it for it in written[1:])
    assert load_trace(tmp_path / "copy.json") == trace
    its[0]["backward_cpu_ns"] = -5
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(TraceFormatError, match="backward_cpu_ns") as err:
        load_trace(tmp_path / "bad.json")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("mangle, expected", [
    (lambda s: s[: len(s) // 2], "truncated"),
    (lambda s: s.replace('"ranks"', '"ranks" oops', 1), "not valid JSON"),
    (lambda s: "", "empty"),
    (lambda s: json.dumps({"format": "ddpsim-trace", "version": 99}), "version 99"),
    (lambda s: json.dumps({"hello": "world"}), "not a ddpsim trace"),
    (lambda s: json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm"}]}), "ddpsim import"),  # torch.profiler's
    (lambda s: json.dumps([{"ph": "X", "name": "ProfilerStep#1"}]), "looks like a Chrome trace"),
    (lambda s: s.replace('"forward"', '"forwards"', 1), "missing field ranks[0].iterations[0].forward"),
    (lambda s: s.replace('"source":"real"', '"source":"guess"').replace('"source": "real"', '"source": "guess"'),
     "source must be"),
    (lambda s: s.replace('"bucket":1,', '"bucket":7,', 1), "bucket 7 is not in the layout in force (3 buckets)"),
    # Note [One key, one value]: a second "meta" was simulated silently at its world size
    (lambda s: s[:-1] + ',"meta":{"world_size":64}}', 'names the key "meta" twice in one object'),
    (lambda s: s.replace('"bucket":1,', '"bucket":1,"bucket":2,', 1), 'names the key "bucket" twice'),
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
    with pytest.raises(TraceFormatError, match=r"is truncated: .*\(Unterminated string starting at line 1, column \d+\)"):
        load_trace(path)


def _sample():
    return json.loads((ROOT / "ddpsim/samples/01_mlp_torch_default.json").read_text())


def test_sizes_beyond_a_pebibyte_are_refused_in_one_line():
    """2^63-1 bytes used to load, and `simulate --trace` then wrote sums it could not read back."""
    raw = _sample()
    raw["params"][0]["bytes"] = 2**63 - 1
    with pytest.raises(TraceFormatError, match=r"params\[0\].bytes should be <= 1125899906842624"):
        parse_trace(json.dumps(raw))
    raw = _sample()
    for p in raw["params"]:
        p["bytes"] = 2**49
    with pytest.raises(TraceFormatError, match="the parameters hold .* bytes together"):
        parse_trace(json.dumps(raw))
    raw = _sample()  # the fuzz found it: the simulation's buffer broadcast of 2^62 bytes did not read back
    raw["meta"]["buffer_bytes"] = 2**62
    with pytest.raises(TraceFormatError, match=r"meta.buffer_bytes should be <= 1125899906842624"):
        parse_trace(json.dumps(raw))


def test_save_refuses_a_trace_it_could_not_read_and_writes_nothing(tmp_path):
    trace = parse_trace(json.dumps(_sample()))
    trace.ranks[0].iterations[1].buckets[0].bytes = 2**60
    out = tmp_path / "out.json"
    with pytest.raises(TraceFormatError, match="not writing .*out.json: it would not load back"):
        save_trace(trace, out)
    assert not out.exists()


def test_a_file_that_is_not_json_is_not_called_truncated():
    with pytest.raises(TraceFormatError, match="is not valid JSON: Expecting property name"):
        parse_trace("{abc")
    with pytest.raises(TraceFormatError, match="is truncated"):
        parse_trace('{"format": "ddpsim-trace", "meta": {')


def test_a_parse_past_its_time_limit_is_given_up_in_one_line():
    from ddpsim.trace.timed_read import parse_trace_within

    text = json.dumps(_sample())
    assert len(parse_trace_within(text, 30, name="ok.json").ranks) == 2
    with pytest.raises(TraceFormatError, match="is not valid JSON"):
        parse_trace_within("{abc", 30, name="bad.json")
    big = json.dumps({**_sample(), "pad": ["x" * 1000] * 20_000})  # 20 MB: more than a millisecond
    with pytest.raises(TraceFormatError, match="big.json took more than 0.001 s to read and was given up"):
        parse_trace_within(big, 0.001, name="big.json")
