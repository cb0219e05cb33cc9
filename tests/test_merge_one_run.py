"""``ddpsim merge`` joins one run's shards only, and says which ranks have none
(``ddpsim.record.merge.one_run``; Note [One job's ranks overlap in every synchronised step]).

The shards are written by the real shard writer (``RankRecorder``, as ``test_merge_roundtrip``
does): two ranks of one run, then one of them swapped for a shard of another run, later by
seconds or with other options, as gathering shards from two torchrun jobs would give.
"""
from test_merge_roundtrip import PARAMS, _write

from ddpsim.cli import main
from ddpsim.trace import load_trace

STEP = [1000] * (6 + PARAMS)  # ns between a step's instants: one iteration of 10 us


def merged(tmp_path, capsys, *ranks):
    """``ranks``: (rank, world size, first time in ns, header fields) per shard; the CLI's rc and output."""
    paths = []
    for rank, world, start, header in ranks:
        paths.append(tmp_path / f"run.json.rank{rank}.jsonl")
        _write(paths[-1], rank, world, (0, start, [STEP, STEP], 64), **header)
    rc = main(["merge", *map(str, paths), "--out", str(tmp_path / "run.json")])
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_one_runs_shards_merge_complete(tmp_path, capsys):
    rc, said = merged(tmp_path, capsys, (0, 2, 10**9, {}), (1, 2, 10**9 + 3000, {}))
    assert rc == 0 and "merged 2 shard(s)" in said and "(complete)" in said
    assert len(load_trace(tmp_path / "run.json").ranks) == 2


def test_a_shard_of_a_later_run_is_refused(tmp_path, capsys):
    rc, said = merged(tmp_path, capsys, (0, 2, 10**9, {}), (1, 2, 10**9 + 10 * 10**9, {}))
    assert rc == 2 and "iteration 0 does not overlap across the shards' ranks" in said
    assert "10.000 s after" in said and "shards of different runs" in said
    assert not (tmp_path / "run.json").exists()


def test_a_shard_of_another_world_size_or_option_is_refused(tmp_path, capsys):
    rc, said = merged(tmp_path, capsys, (0, 2, 10**9, {}), (1, 3, 10**9, {}))
    assert rc == 2 and "records world_size 3 but" in said and "rank0.jsonl 2" in said
    rc, said = merged(tmp_path, capsys, (0, 2, 10**9, {"options": {"bucket_cap_mb": None}}),
                      (1, 2, 10**9, {"options": {"bucket_cap_mb": 1.0}}))
    assert rc == 2 and "records options.bucket_cap_mb 1.0 but" in said and "None: shards of different runs" in said


def test_missing_ranks_are_named(tmp_path, capsys):
    rc, said = merged(tmp_path, capsys, (0, 4, 10**9, {}), (1, 4, 10**9, {}))
    assert rc == 0 and "(INCOMPLETE: no shard of rank(s) 2, 3 of world size 4)" in said


def test_an_empty_or_cut_shard_says_which(tmp_path, capsys):
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "cut.jsonl").write_text('{"kind": "header", "ra')  # cut inside its header line
    for name, said in (("empty.jsonl", "is empty"), ("cut.jsonl", "has no header line (cut off")):
        assert main(["merge", str(tmp_path / name), "--out", str(tmp_path / "run.json")]) == 2
        assert said in capsys.readouterr().err
