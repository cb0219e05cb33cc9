"""``ddpsim merge`` refuses a malformed shard in one line naming the file and line, exit 2, never a
traceback, and in time linear in the shard (Note [A shard is read strictly] in ddpsim/record/merge.py).

The shards are small and hand-made here, in the shape ``RankRecorder`` writes (ddpsim/events.py):
a header line, a header_update with the parameters, a layout, iterations, an end line.
"""
from __future__ import annotations

import json

import pytest

import ddpsim.record.merge as merge_module
from ddpsim.cli import main as cli
from ddpsim.trace import load_trace
from ddpsim.trace.checks import MAX_WORLD_SIZE

PARAMS = [{"index": i, "name": f"p{i}", "shape": [1], "dtype": "float32", "bytes": 4, "requires_grad": True}
          for i in range(2)]


def iteration(n: int, t: int) -> dict:
    """Iteration ``n`` of 10 us from ``t`` (ns), as the recorder writes it."""
    return {"kind": "iteration", "iteration": n, "sync": True,
            "grad_ready": [{"t_ns": t + 2000, "param": 1}, {"t_ns": t + 3000, "param": 0}],
            "buckets": [{"bucket": 0, "bytes": 8, "ready_ns": t + 3000, "launch_ns": t + 4000, "complete_ns": t + 5000}],
            "forward": {"start_ns": t, "end_ns": t + 1000}, "backward": {"start_ns": t + 1000, "end_ns": t + 6000},
            "optimizer": {"start_ns": t + 6000, "end_ns": t + 7000}}


def shard_lines(number: int, world: int = 2, **header) -> list[str]:
    """A whole shard of rank ``number``, one JSON text per line; ``header`` overrides header fields."""
    head = {"kind": "header", "rank": number, "host": "vm", "pid": 100 + number, "world_size": world,
            "backend": "gloo", "impl": "torch", "model": "mlp", "clock": {"method": "drawn", "offset_ns": 0}, **header}
    objs = [head, {"kind": "header_update", "params": PARAMS},
            {"kind": "layout", "from_iteration": 0, "layout_kind": "construction",
             "buckets": [{"index": 0, "params": [1, 0], "bytes": 8, "cap_bytes": None}]},
            iteration(0, 10**9), iteration(1, 10**9 + 10_000), {"kind": "end", "ddp_logging_data": None}]
    return [json.dumps(o) for o in objs]


def run_merge(tmp_path, capsys, *texts: str) -> tuple[int, str, str]:
    """Merge shards of the given texts (rank0.jsonl, rank1.jsonl, ...): (rc, stdout, stderr)."""
    paths = []
    for r, text in enumerate(texts):
        paths.append(tmp_path / f"run.json.rank{r}.jsonl")
        paths[-1].write_text(text) if isinstance(text, str) else paths[-1].write_bytes(text)
    rc = cli(["merge", *map(str, paths), "--out", str(tmp_path / "run.json")])
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(tmp_path, capsys, bad: list[str] | str | bytes, *said: str, line: int | None = None) -> str:
    """Merge a good rank 0 with ``bad`` as rank 1 (lines, or the file's text): refused in one line."""
    text = "\n".join(bad) + "\n" if isinstance(bad, list) else bad
    rc, out, err = run_merge(tmp_path, capsys, "\n".join(shard_lines(0)) + "\n", text)
    assert rc == 2, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("ddpsim merge: error: ") and "run.json.rank1.jsonl" in err, err
    if line is not None:
        assert f"run.json.rank1.jsonl: line {line}" in err, err
    for words in said:
        assert words in err, err
    assert not (tmp_path / "run.json").exists()
    return err


def with_line(n: int, text: str, rank: int = 1) -> list[str]:
    """Rank ``rank``'s good shard with ``text`` put in as line ``n`` (1-based)."""
    lines = shard_lines(rank)
    return lines[:n - 1] + [text] + lines[n - 1:]


def replacing(n: int, text: str) -> list[str]:
    """Rank 1's good shard with line ``n`` (1-based) replaced by ``text``."""
    lines = shard_lines(1)
    return lines[:n - 1] + [text] + lines[n:]


def test_good_shards_merge(tmp_path, capsys):
    rc, out, err = run_merge(tmp_path, capsys, *("\n".join(shard_lines(r)) + "\n" for r in (0, 1)))
    assert rc == 0 and "merged 2 shard(s)" in out and "(complete)" in out, err
    assert [len(r.iterations) for r in load_trace(tmp_path / "run.json").ranks] == [2, 2]


@pytest.mark.parametrize("text, said", [
    ("5", "line 2 is 5, not a JSON object"), ("null", "line 2 is null, not a JSON object"),
    ("[1,2]", "line 2 is [1,2], not a JSON object"), ('"header"', "not a JSON object"),
    ("{nope", "line 2 is not valid JSON"), ('{"kind": "x", "v": ' + "9" * 5000 + "}", "5000-digit integer"),
    ("[" * 5000 + "]" * 5000, "nests JSON 5000 levels deep"), ('{"kind": "x", "v": NaN}', "NaN"),
])
def test_a_line_that_is_not_a_json_object_is_named(tmp_path, capsys, text, said):
    refused(tmp_path, capsys, with_line(2, text), said, line=2)


def test_a_first_line_that_is_a_list_is_named(tmp_path, capsys):
    refused(tmp_path, capsys, ["[1]", *shard_lines(1)[1:]], "line 1 is [1], not a JSON object", line=1)


@pytest.mark.parametrize("header, said", [
    ({"rank": "1"}, "field rank should be an integer, not '1'"), ({"rank": None}, "field rank: should not be null"),
    ({"rank": True}, "field rank should be an integer"), ({"rank": -1}, "field rank should be >= 0"),
    ({"world_size": 10**9}, f"field world_size should be <= {MAX_WORLD_SIZE}"),
    ({"world_size": 0}, "field world_size should be >= 1"), ({"world_size": "2"}, "field world_size should be an integer"),
    ({"clock": "x"}, "field clock should be an object, not 'x'"),
    ({"clock": {"offset_ns": "5"}}, "field clock.offset_ns should be an integer, not '5'"),
    ({"clock": {"offset_ns": 1.5}}, "field clock.offset_ns should be an integer"),
    ({"clock": {"offset_ns": 0, "skew_ns": [1]}}, "field clock.skew_ns should be an integer"),
    ({"clock": None}, "field clock: should not be null"), ({"host": 5}, "field host should be a string"),
    ({"options": [1]}, "field options should be an object, not [1]"),
])
def test_a_bad_header_field_is_named(tmp_path, capsys, header, said):
    refused(tmp_path, capsys, shard_lines(1, **header), said, line=1)


def test_a_header_without_rank_or_a_rank_outside_its_world_is_refused(tmp_path, capsys):
    no_rank = json.loads(shard_lines(1)[0])
    del no_rank["rank"]
    refused(tmp_path, capsys, [json.dumps(no_rank), *shard_lines(1)[1:]], "missing field rank", line=1)
    refused(tmp_path, capsys, shard_lines(1, world=1), "rank 1 is not below its world_size 1")
    refused(tmp_path, capsys, replacing(2, '{"kind": "header_update", "params": "x"}'),
            "field params should be a list, not 'x'", line=2)


@pytest.mark.parametrize("text, line, said", [
    ('{"kind": "layout"}', 3, "missing field from_iteration"),
    ('{"kind": "layout", "from_iteration": 0, "layout_kind": 1, "buckets": []}', 3, "field layout_kind should be a string"),
    ('{"kind": "iteration", "iteration": 0}', 4, "missing field forward"),
    ('{"kind": "iteration", "iteration": 0, "forward": "x"}', 4, "field forward should be an object, not 'x'"),
    ('{"kind": "iteration", "iteration": [0], "forward": {}}', 4, "field iteration should be an integer"),
    ('{"kind": "iteration", "iteration": 0, "forward": {"start_ns": 1}, "backward": {}}', 4,
     "missing field forward.end_ns"),
    ('{"kind": "iteration", "iteration": 0, "sync": "yes", "forward": {}}', 4, "field sync should be true or false"),
    ('{"kind": "error"}', 6, "missing field error"), ('{"kind": "error", "error": 3}', 6, "field error should be a string"),
    ('{"kind": "join", "start_ns": 5}', 6, "missing field end_ns"),
    ('{"kind": "end", "ddp_logging_data": "x"}', 6, "field ddp_logging_data should be an object"),
])
def test_a_line_missing_what_merge_reads_is_named(tmp_path, capsys, text, line, said):
    refused(tmp_path, capsys, with_line(line, text), said, line=line)


def test_a_huge_world_size_is_refused_without_using_memory(tmp_path, capsys):
    """The shard claiming 10^9 ranks is read first and alone too: merge once built range(world) from it."""
    bad = "\n".join(shard_lines(0, world=10**9)) + "\n"
    rc, _, err = run_merge(tmp_path, capsys, bad)
    assert rc == 2 and err.count("\n") == 1 and f"should be <= {MAX_WORLD_SIZE}" in err
    assert "run.json.rank0.jsonl: line 1" in err


def test_missing_ranks_come_from_the_gaps(tmp_path, capsys):
    texts = ["\n".join(shard_lines(r, world=6)) + "\n" for r in (0, 2, 3)]
    for r, text in zip((0, 2, 3), texts):
        (tmp_path / f"s{r}.jsonl").write_text(text)
    rc = cli(["merge", *(str(tmp_path / f"s{r}.jsonl") for r in (3, 0, 2)), "--out", str(tmp_path / "run.json")])
    assert rc == 0 and "no shard of rank(s) 1, 4, 5 of world size 6" in capsys.readouterr().out
    assert load_trace(tmp_path / "run.json").meta["missing_ranks"] == [1, 4, 5]


def test_a_cut_last_line_is_dropped_but_a_bad_complete_one_is_not(tmp_path, capsys):
    lines = shard_lines(1)
    cut = "\n".join(lines[:-1]) + "\n" + lines[-1][:12]  # the rank died writing its end line: no newline
    rc, out, _ = run_merge(tmp_path, capsys, "\n".join(shard_lines(0)) + "\n", cut)
    assert rc == 0 and "(INCOMPLETE: rank 1 stopped before finishing)" in out  # it said "(INCOMPLETE)" alone
    (tmp_path / "run.json").unlink()
    refused(tmp_path, capsys, [*lines[:-1], lines[-1][:12]], "line 6 is truncated", line=6)


def test_a_file_not_text_or_too_large_is_refused(tmp_path, capsys, monkeypatch):
    refused(tmp_path, capsys, b"\xff\xfe\x00" * 100, "is not UTF-8 text, so not a ddpsim shard")
    monkeypatch.setattr(merge_module, "MAX_TRACE_BYTES", 3000)  # rank 0 is under it
    refused(tmp_path, capsys, shard_lines(1) * 3, "MiB; a shard holds at most")


def test_a_folder_for_a_shard_and_an_empty_out_are_named(tmp_path, capsys):
    shard = tmp_path / "run.json.rank0.jsonl"
    shard.write_text("\n".join(shard_lines(0, world=1)) + "\n")
    (tmp_path / "adir.json").mkdir()
    for args, said in ([[str(tmp_path / "adir.json"), "--out", str(tmp_path / "m.json")],
                        f"shard {tmp_path / 'adir.json'} is a folder, not a shard file"],
                       [[str(shard), "--out", ""], "--out wants a file name, not an empty one"]):
        assert cli(["merge", *args]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ddpsim merge: error: {said}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir.json", "run.json.rank0.jsonl"]
