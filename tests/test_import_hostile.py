"""``ddpsim import`` on hostile profiles: every bad input is one line naming the file and the problem,
exit status 2, never a traceback, an exhausted memory or a quadratic scan.

The fixture is a Kineto trace written by hand (one step: a DDP forward launching one kernel, a
backward with one gradient and its allreduce, an optimizer step), each test breaking one thing.
"""
import copy
import gzip
import json
import random

import pytest

from ddpsim.cli import main as cli
from ddpsim.samples import H100_DIR
from ddpsim.trace import kineto
from ddpsim.trace.checks import MAX_WORLD_SIZE
from ddpsim.trace.kineto import Op, pair_gloo_runs
from ddpsim.trace.profile_job import missing_ranks


def _x(name, cat, ts, dur, tid=1, pid=1, args=None):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            **({"args": args} if args is not None else {})}


TINY = {"traceEvents": [
    _x("ProfilerStep#1", "user_annotation", 0, 1000),
    _x("DistributedDataParallel.forward", "python_function", 10, 100),
    _x("cudaLaunchKernel", "cuda_runtime", 20, 5, args={"correlation": 1}),  # traceEvents[2]
    _x("gemm", "kernel", 30, 50, tid=7, pid=0, args={"correlation": 1}),  # traceEvents[3]
    _x("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 200, 100, tid=2),
    _x("torch::autograd::AccumulateGrad", "cpu_op", 250, 10, tid=2,
       args={"Input Dims": [[4, 4]], "Input type": ["float"]}),
    _x("c10d::allreduce_", "cpu_op", 270, 5, tid=2, args={"Input Dims": [[[4, 4]]]}),
    _x("Optimizer.step#SGD.step", "python_function", 400, 50)],
    "distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"}, "deviceProperties": [{"name": "H100"}]}


def profile(tmp_path, change=None, name="rank0.json", **info):
    """TINY, ``distributedInfo`` updated with ``info``, changed in place by ``change``, written as ``name``."""
    data = copy.deepcopy(TINY)
    data["distributedInfo"].update(info)
    if change is not None:
        change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def refused(capsys, tmp_path, *paths) -> str:
    """The one line ``import`` printed for ``paths``, having exited 2 and written nothing."""
    out = tmp_path / "out.json"
    assert cli(["import", *map(str, paths), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not out.exists(), err
    return err[0]


@pytest.fixture(scope="module")
def one_step():
    """The bundled ResNet-50 profile (one rank, NCCL on an H100) cut to its first step: its CPU events, the
    GPU work they launched and the metadata; 9,000 of its 26,000 events, a 180 KB .json.gz."""
    data = json.loads(gzip.decompress((H100_DIR / "resnet50_nccl_ws1_rank0.kineto.json.gz").read_bytes()))
    events = data["traceEvents"]
    step = next(e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#"))
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") not in kineto.GPU_CATS
           and step["ts"] <= e["ts"] <= step["ts"] + step["dur"]]
    calls = {e["args"]["correlation"] for e in cpu if "correlation" in e.get("args", {})}
    gpu = [e for e in events if e.get("cat") in kineto.GPU_CATS and e["args"].get("correlation") in calls]
    data["traceEvents"] = [e for e in events if e.get("ph") == "M"] + cpu + gpu
    return data


def bundled(tmp_path, data, name, change=None):
    """``data`` (``one_step``) with ``change`` made to a copy, written gzipped as ``name``."""
    data = copy.deepcopy(data)
    if change is not None:
        change(data)
    path = tmp_path / name
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


def first(name):
    """A change to the first event of that name (a ``ProfilerStep#`` prefix: the CPU's step span)."""
    def change(data, **fields):
        event = next(e for e in data["traceEvents"] if e.get("cat") not in ("gpu_user_annotation",)
                     and e.get("name", "").startswith(name))
        (event["args"] if "args" in fields else event).update(fields.get("args", fields))
        return event
    return change


def test_the_tiny_profile_imports(tmp_path, capsys):
    assert cli(["import", str(profile(tmp_path)), "--out", str(tmp_path / "out.json")]) == 0
    assert "1 rank(s), 1 iterations per rank" in capsys.readouterr().out


def test_a_profile_that_repeats_a_key_imports_as_json_reads_it(tmp_path, capsys):
    """Note [One key, one value]: a ddpsim trace refuses a repeated key; a profile, another program's output,
    keeps the last value, as json does (and its import's own trace, written once per key, loads back)."""
    path = profile(tmp_path)
    path.write_text(path.read_text().replace('"pid": 1,', '"pid": 5, "pid": 1,', 1))
    assert '"pid": 5, "pid": 1,' in path.read_text()
    assert cli(["import", str(path), "--out", str(tmp_path / "out.json")]) == 0
    assert "1 rank(s), 1 iterations per rank" in capsys.readouterr().out


def test_a_world_size_past_the_readers_cap_is_refused(tmp_path, capsys):
    line = refused(capsys, tmp_path, profile(tmp_path, world_size=10**9))
    assert "rank0.json: distributedInfo.world_size should be an integer from 1 to 10,000,000, not 1000000000" in line


def test_the_largest_world_names_its_first_missing_ranks_without_listing_them_all(tmp_path, capsys):
    assert cli(["import", str(profile(tmp_path, world_size=MAX_WORLD_SIZE)), "--out", str(tmp_path / "o.json")]) == 0
    assert f"no profile of rank(s) 1, 2, 3, 4, 5, 6, 7, 8 and {MAX_WORLD_SIZE - 9} more" in capsys.readouterr().out
    said = missing_ranks([{"world_size": MAX_WORLD_SIZE}] * 2, [0, 5])
    assert said.endswith(f"rank(s) 1, 2, 3, 4, 6, 7, 8, 9 and {MAX_WORLD_SIZE - 10} more is among them")
    assert missing_ranks([{"world_size": 3}] * 2, [0, 2]).endswith("rank(s) 1 is among them")
    assert missing_ranks([{"world_size": 2}] * 2, [1, 0]) is None


def test_brackets_nested_too_deep_are_refused(tmp_path, capsys):
    (tmp_path / "deep.json").write_text("[" * 100_000)
    assert "deep.json nests JSON 100000 levels deep" in refused(capsys, tmp_path, tmp_path / "deep.json")


def test_an_empty_profile_is_called_empty(tmp_path, capsys):
    """As the trace reader says it: import called it "not valid JSON: Expecting value at line 1, column 1"."""
    (tmp_path / "empty.json").write_text("\n")
    assert refused(capsys, tmp_path, tmp_path / "empty.json").endswith(f"{tmp_path / 'empty.json'} is empty")


@pytest.mark.parametrize("key", ["ts", "dur"])
def test_times_too_large_are_refused(tmp_path, capsys, key):
    big = profile(tmp_path, lambda d: d["traceEvents"][7].update({key: "BIG"}), name="big.json")
    big.write_text(big.read_text().replace('"BIG"', str(10**400)))  # valid JSON: a number of 401 digits
    assert "big.json holds a 401-digit integer" in refused(capsys, tmp_path, big)
    far = profile(tmp_path, lambda d: d["traceEvents"][7].update({key: 1e300}), name="far.json")
    assert f"far.json: traceEvents[7].{key} should be a number of microseconds" in refused(capsys, tmp_path, far)


@pytest.mark.parametrize("index, key, value, want", [
    (2, "args", [1], "traceEvents[2].args should be an object, not [1]"),
    (0, "args", "x", 'traceEvents[0].args should be an object, not "x"'),
    (3, "tid", [1], "traceEvents[3].tid should be a number or a string, not [1]"),
    (2, "pid", {"a": 1}, 'traceEvents[2].pid should be a number or a string, not {"a": 1}'),
    (0, "ts", "soon", 'traceEvents[0].ts should be a number of microseconds'),
    (0, "dur", True, "traceEvents[0].dur should be a number of microseconds"),
])
def test_an_event_field_of_the_wrong_type_is_named(tmp_path, capsys, index, key, value, want):
    bad = profile(tmp_path, lambda d: d["traceEvents"][index].update({key: value}))
    assert f"rank0.json: {want}" in refused(capsys, tmp_path, bad)


@pytest.mark.parametrize("index", [2, 3])  # the runtime call, the kernel it launched
def test_a_correlation_that_is_not_an_integer_is_named(tmp_path, capsys, index):
    bad = profile(tmp_path, lambda d: d["traceEvents"][index]["args"].update(correlation=[1, 2]))
    assert f"rank0.json: traceEvents[{index}].args.correlation should be an integer, not [1, 2]" in refused(
        capsys, tmp_path, bad)


@pytest.mark.parametrize("key, value, want", [
    ("deviceProperties", "x", 'deviceProperties should be a list of objects, not "x"'),
    ("deviceProperties", [1], "deviceProperties should be a list of objects, not [1]"),
    ("deviceProperties", [{"name": 5}], "deviceProperties[0].name should be a string, not 5"),
    ("distributedInfo", [1, 2], "distributedInfo should be an object, not [1, 2]"),
    ("distributedInfo", {"backend": 5}, "distributedInfo.backend should be a string, not 5"),
    ("distributedInfo", {"world_size": 2.0}, "distributedInfo.world_size should be an integer from 1 to 10,000,000"),
])
def test_a_header_field_of_the_wrong_type_is_named(tmp_path, capsys, key, value, want):
    bad = profile(tmp_path, lambda d: d.update({key: value}))
    assert f"rank0.json: {want}" in refused(capsys, tmp_path, bad)


@pytest.mark.parametrize("rank, shown", [("x", '"x"'), (None, "null"), ([1], "[1]"), (True, "true"), (2, "2")])
def test_a_second_profiles_bad_rank_is_named(tmp_path, capsys, rank, shown):
    first = profile(tmp_path, world_size=2)
    second = profile(tmp_path, name="rank1.json", world_size=2, rank=rank)
    line = refused(capsys, tmp_path, first, second)
    assert f"rank1.json: distributedInfo.rank should be an integer from 0 to 1 (below its world_size), not {shown}" in line


def test_a_gzip_bomb_and_a_file_too_large_are_refused_before_they_are_read(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(kineto, "MAX_TRACE_BYTES", 2**20)  # the trace reader's 512 MiB, scaled down
    text = json.dumps({**TINY, "pad": " " * 2**21})
    (tmp_path / "bomb.json.gz").write_bytes(gzip.compress(text.encode()))  # 2 MiB in 3 KB
    line = refused(capsys, tmp_path, tmp_path / "bomb.json.gz")
    assert "bomb.json.gz holds more than 1 MiB of text once decompressed; the limit is 1 MiB" in line
    assert "turn one per rank" not in line  # the trace reader's hint to run import: this is the import
    (tmp_path / "big.json").write_text(text)
    assert "big.json is 2 MiB; the limit is 1 MiB" in refused(capsys, tmp_path, tmp_path / "big.json")


def test_what_slips_past_the_checks_still_names_its_file(tmp_path, capsys, monkeypatch):
    from ddpsim.trace.profile_import import RankImport

    def broken(self, number, step):
        raise KeyError("surprise")
    monkeypatch.setattr(RankImport, "iteration", broken)
    line = refused(capsys, tmp_path, profile(tmp_path))
    assert "rank0.json could not be read: KeyError: 'surprise'" in line


def _old_pairing(launches, runs):
    """pair_gloo_runs as it was: a scan of the unpaired runs per launch (quadratic)."""
    free, out = sorted(runs, key=lambda o: o.start), []
    for op in launches:
        dims = op.args.get("Input Dims")
        want = dims[0][0] if isinstance(dims, list) and dims and isinstance(dims[0], list) and dims[0] else None
        match = next((r for r in free if r.start >= op.start
                      and (want is None or (r.args.get("Input Dims") or [None])[0] in (None, want))), None)
        if match is not None:
            free.remove(match)
        out.append(match)
    return out


def test_gloo_runs_pair_as_the_quadratic_scan_paired_them():
    rng = random.Random(0)
    shapes = [None, [], [[3]], [[4]], [[3], [4]], [[2, 2]], [[1.0]], [[1]], [[True]]]  # [] / None: no shape
    for _ in range(300):
        launches = [Op("c10d::allreduce_", "cpu_op", 1, 1, t, t + 1, {} if s is None else {"Input Dims": [s]})
                    for t, s in ((rng.randint(0, 20), rng.choice(shapes[2:] + [None])) for _ in range(rng.randint(0, 12)))]
        runs = [Op("gloo:all_reduce", "cpu_op", 1, 2, t, t + 5, {} if s is None else {"Input Dims": s})
                for t, s in ((rng.randint(0, 25), rng.choice(shapes)) for _ in range(rng.randint(0, 12)))]
        want = _old_pairing(launches, runs)
        got = pair_gloo_runs(launches, runs)
        assert [id(r) for r in got] == [id(r) for r in want], (launches, runs)


def test_the_bundled_profiles_first_step_imports(tmp_path, capsys, one_step):
    assert cli(["import", str(bundled(tmp_path, one_step, "step.json.gz")), "--out", str(tmp_path / "o.json")]) == 0
    assert "1 rank(s), 1 iterations per rank, 161 parameters" in capsys.readouterr().out


@pytest.mark.parametrize("digits", ["9" * 5000, "9" * 19])
def test_a_step_number_past_int64_names_the_file_and_the_step(tmp_path, capsys, one_step, digits):
    """5,000 digits were Python's int() limit traced back without the file; 19 nines a field of the
    imported trace, again without the file."""
    bad = bundled(tmp_path, one_step, "step.json.gz", lambda d: first("ProfilerStep#")(d, name="ProfilerStep#" + digits))
    line = refused(capsys, tmp_path, bad)
    assert f'step.json.gz: event "ProfilerStep#{digits[:20]}' in line
    assert "at ts 4561201725882.825: its step number is out of range (at most 9223372036854775807" in line


@pytest.mark.parametrize("name, dims", [("c10d::allreduce_", [[[10**18, 10**18]]]),
                                        ("torch::autograd::AccumulateGrad", [[10**18, 10**18]])])
def test_a_tensor_no_trace_holds_names_the_file_and_the_event(tmp_path, capsys, one_step, name, dims):
    def change(data):  # without NCCL's sizes (gloo's profiles have none), an allreduce is sized by its shape
        for e in data["traceEvents"]:
            e.get("args", {}).pop("In msg nelems", None)
        first(name)(data, args={"Input Dims": dims})
    line = refused(capsys, tmp_path, bundled(tmp_path, one_step, "dims.json.gz", change))
    assert f'dims.json.gz: event "{name}" at ts ' in line
    assert 'its args."Input Dims" gives more than 1125899906842624 bytes; a trace holds sizes from 0' in line


def test_an_nccl_size_below_zero_names_the_file_and_the_event(tmp_path, capsys, one_step):
    bad = bundled(tmp_path, one_step, "nelems.json.gz",
                  lambda d: first("record_param_comms")(d, args={"In msg nelems": -1}))
    assert 'nelems.json.gz: event "record_param_comms" at ts ' in (line := refused(capsys, tmp_path, bad))
    assert 'its args."In msg nelems" gives -4 bytes' in line


@pytest.mark.parametrize("name, dur", [("DistributedDataParallel.forward", -1000), ("ProfilerStep#", -5)])
def test_a_negative_duration_names_the_file_and_the_event(tmp_path, capsys, one_step, name, dur):
    """Once accepted: a forward ending before it starts imported without a note, a step ending before it
    starts was 'no DDP forward or no backward'."""
    event = {}
    bad = bundled(tmp_path, one_step, "neg.json.gz", lambda d: event.update(first(name)(d, dur=dur)))
    line = refused(capsys, tmp_path, bad)
    assert "neg.json.gz: traceEvents[" in line
    assert f'event "{event["name"]}" at ts {json.dumps(event["ts"])}, has a negative duration (dur {dur} us)' in line


def test_an_empty_out_is_refused_before_the_profiles_are_read(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli(["import", str(profile(tmp_path)), "--out", ""]) == 2
    assert capsys.readouterr().err == "ddpsim import: error: --out wants a file name, not an empty one\n"
    assert [p.name for p in tmp_path.iterdir()] == ["rank0.json"]
