"""Chrome-trace export in the PyTorch profiler's (Kineto) shape: what Perfetto and HTA read."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from ddpsim import load_trace
from ddpsim.trace.export import COMM_STREAM, COMPUTE_STREAM, HOST_PID, to_chrome, to_kineto

FIXTURE = "tests/fixtures/tiny_trace.json"


def _device(events):
    return [e for e in events if e["ph"] in ("X", "i") and e["pid"] < HOST_PID]


def test_export_streams_categories_and_args():
    trace = load_trace(ROOT / FIXTURE)
    events = to_chrome(trace)["traceEvents"]
    body = _device(events)
    assert {e["pid"] for e in body} == {r.rank for r in trace.ranks}  # device process = rank
    kinds = {e["args"].get("ddpsim") for e in body if e["ph"] == "X"} | {e["cat"] for e in body if e["ph"] == "i"}
    assert {"forward", "backward", "optimizer", "allreduce", "grad_ready", "bucket_ready"} <= kinds
    for e in body:
        if e["ph"] == "X":
            assert e["cat"] == "kernel" and e["args"]["stream"] == e["tid"]
            if e["args"]["ddpsim"] == "allreduce":  # communication on its own stream(s)
                assert e["tid"] >= COMM_STREAM and e["name"].startswith("ncclDevKernel")
                assert {"iteration", "bucket", "bytes", "backend"} <= set(e["args"])
            else:
                assert e["tid"] == COMPUTE_STREAM
        elif e["cat"] == "grad_ready":
            assert {"iteration", "param", "name", "bucket"} <= set(e["args"])


def test_profiler_steps_launches_and_flows():
    trace = load_trace(ROOT / FIXTURE)
    events = to_kineto(trace, 0)["traceEvents"]
    steps = [e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
    n = len(trace.ranks[0].iterations)
    assert steps == [f"ProfilerStep#{i}" for i in range(n + 1)]  # + the empty closing step (HTA)
    kernels = {e["args"]["correlation"] for e in events if e.get("cat") == "kernel"}
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"}
    assert kernels == launches  # every device span has its host launch
    starts = {e["id"]: e for e in events if e["ph"] == "s" and e["cat"] == "ddp_grad_to_bucket"}
    ends = {e["id"]: e for e in events if e["ph"] == "f" and e["cat"] == "ddp_grad_to_bucket"}
    assert starts and starts.keys() == ends.keys()
    synced = [it for it in trace.ranks[0].iterations if it.buckets]
    assert len(starts) == sum(len(it.grad_ready) for it in synced)  # one arrow per gradient
    assert all(ends[i]["tid"] >= COMM_STREAM and ends[i]["ts"] >= starts[i]["ts"] for i in starts)


def test_rank_file_header_is_kinetos():
    trace = load_trace(ROOT / FIXTURE)
    text = json.dumps(to_kineto(trace, 1))
    assert text.startswith('{"distributedInfo": {"backend": "gloo", "rank": 1, "world_size": 2}')


def test_timestamps_are_microseconds_on_one_base():
    trace = load_trace(ROOT / FIXTURE)
    events = to_chrome(trace)["traceEvents"]
    first = trace.ranks[1].iterations[0].forward
    fwd = next(e for e in events if e.get("name") == "ddpsim::forward" and e["pid"] == trace.ranks[1].rank)
    assert fwd["ts"] == first.start_ns / 1000 and fwd["dur"] == first.duration_ns / 1000


def test_spans_on_one_track_nest():
    """Perfetto needs X events on one (pid, tid) to nest: no partial overlaps."""
    trace = load_trace(ROOT / FIXTURE)
    tracks = {}
    for e in to_chrome(trace)["traceEvents"]:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -s[1]))  # an enclosing span before what it holds
        for (s1, e1), (s2, e2) in zip(spans, spans[1:]):
            assert s2 >= e1 - 1e-9 or e2 <= e1, "overlapping spans must nest"


def test_cli_writes_json_and_per_rank_files(tmp_path):
    out = tmp_path / "chrome.json"
    run = lambda *a: subprocess.run([sys.executable, "-m", "ddpsim", "export", "--chrome", *a],  # noqa: E731
                                    cwd=ROOT, capture_output=True, text=True, timeout=60)
    result = run(FIXTURE, str(out))
    assert result.returncode == 0, result.stderr
    assert json.loads(out.read_text())["displayTimeUnit"] == "ms"
    result = run(FIXTURE, str(tmp_path / "ranks"), "--per-rank", "--steady")
    assert result.returncode == 0, result.stderr
    files = sorted(p.name for p in (tmp_path / "ranks").iterdir())
    assert files == ["rank0.json", "rank1.json"]
    assert json.loads((tmp_path / "ranks" / "rank1.json").read_text())["distributedInfo"]["rank"] == 1


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "ddpsim", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_an_export_reads_back_as_its_trace(tmp_path):
    """Note [An export carries its trace]: the one-file export loads as the trace it came from, every
    iteration (not only the steady ones it shows), and ``ddpsim import`` gives it back whole; the
    per-rank folder likewise, from its lowest rank's file."""
    trace = load_trace(ROOT / FIXTURE)
    one, ranks = tmp_path / "chrome.json", tmp_path / "ranks"
    assert _cli("export", "--chrome", FIXTURE, str(one), "--steady").returncode == 0
    assert _cli("export", "--chrome", FIXTURE, str(ranks), "--per-rank").returncode == 0
    assert load_trace(one).to_dict() == trace.to_dict()
    for source in (one, ranks, ranks / "rank0.json"):
        out = tmp_path / "back.json"
        result = _cli("import", str(source), "--out", str(out))
        assert result.returncode == 0, result.stderr
        assert "carries" in result.stdout and load_trace(out).to_dict() == trace.to_dict()
    head = (ranks / "rank1.json").read_text()
    assert '"ddpsimTrace"' not in head and head.startswith('{"distributedInfo"')  # HTA's rank regex first
    result = _cli("import", str(ranks / "rank1.json"), "--out", str(tmp_path / "x.json"))
    assert result.returncode != 0 and "lowest rank's file" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.json").exists()
    result = _cli("import", str(one), str(ranks / "rank0.json"), "--out", str(tmp_path / "x.json"))
    assert result.returncode != 0 and "import one of them" in result.stderr
    old = json.loads(one.read_text())
    del old["ddpsimTrace"]  # an export made before it carried its trace
    (tmp_path / "old.json").write_text(json.dumps(old))
    result = _cli("import", str(tmp_path / "old.json"), "--out", str(tmp_path / "x.json"))
    assert result.returncode != 0 and "export again" in result.stderr and not (tmp_path / "x.json").exists()


def test_an_export_of_an_imported_profile_reads_back_too(tmp_path):
    """A trace made by ``ddpsim import`` (it has meta.import_notes) comes back as the trace it was."""
    from ddpsim.samples import BUNDLED_DIR

    src = BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json"
    assert "import_notes" in load_trace(src).meta
    assert _cli("export", "--chrome", str(src), str(tmp_path / "x.json")).returncode == 0
    result = _cli("import", str(tmp_path / "x.json"), "--model", "mlp", "--out", str(tmp_path / "y.json"))
    assert result.returncode == 0, result.stderr
    assert "carries" in result.stdout and "--model is not needed" in result.stdout
    assert load_trace(tmp_path / "y.json").to_dict() == load_trace(src).to_dict()


def _cli_capped(limit: int, *args):
    """``_cli`` under a file-size limit of ``limit`` bytes, a write past it failing with EFBIG (as
    ``(trap '' XFSZ; ulimit -f N; ddpsim ...)``)."""
    def cap():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([sys.executable, "-m", "ddpsim", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, preexec_fn=cap)


@pytest.mark.parametrize("per_rank", [False, True], ids=["one-file", "per-rank"])
def test_a_write_that_fails_names_the_file_and_leaves_no_part_of_one(tmp_path, per_rank):
    out = tmp_path / ("ranks" if per_rank else "chrome.json")
    if not per_rank:
        out.write_text("the previous export")  # kept whole, not cut
    result = _cli_capped(4096, "export", "--chrome", FIXTURE, str(out), *(["--per-rank"] if per_rank else []))
    named = out / "rank0.json" if per_rank else out
    said = " (no rank's file written; 2 of 2 not written)" if per_rank else ""
    assert result.returncode == 2 and result.stderr == f"ddpsim export: error: cannot use {named}: File too large{said}\n"
    if per_rank:
        assert list(out.iterdir()) == []
    else:
        assert sorted(p.name for p in tmp_path.iterdir()) == ["chrome.json"]
        assert out.read_text() == "the previous export"
    result = _cli("export", "--chrome", FIXTURE, "/proc/version")  # a folder that takes no new file
    assert result.returncode == 2 and result.stderr.startswith("ddpsim export: error: cannot use /proc/version: ")
    assert result.stderr.count("\n") == 1 and "its folder /proc takes no new file" in result.stderr


def test_a_per_rank_export_that_fails_says_which_files_it_wrote_whole(tmp_path):
    ranks = tmp_path / "ranks"
    (ranks / "rank1.json").mkdir(parents=True)  # rank 1's file cannot be written
    result = _cli("export", "--chrome", FIXTURE, str(ranks), "--per-rank")
    assert result.returncode == 2 and result.stderr == (
        f"ddpsim export: error: cannot use {ranks / 'rank1.json'}: Is a directory (rank0.json written whole before "
        "it; 1 of 2 not written)\n")
    assert load_trace(ranks / "rank0.json").to_dict() == load_trace(ROOT / FIXTURE).to_dict()


@pytest.mark.parametrize("per_rank", [[], ["--per-rank"]], ids=["one-file", "per-rank"])
def test_an_empty_output_path_is_refused_and_nothing_is_written(tmp_path, capsys, monkeypatch, per_rank):
    from ddpsim.cli import main as cli

    monkeypatch.chdir(tmp_path)  # where '' would have put the files
    assert cli(["export", "--chrome", str(ROOT / FIXTURE), "", *per_rank]) == 2
    what = "a folder name" if per_rank else "a file name"
    assert capsys.readouterr().err == f"ddpsim export: error: OUT wants {what}, not an empty one\n"
    assert list(tmp_path.iterdir()) == []


def test_a_per_rank_export_refuses_a_folder_holding_other_ranks_files(tmp_path):
    """HTA reads every rank file of the folder as one run: rank2.json and rank3.json left by an earlier
    4-rank export would join this 2-rank trace's, so the export refuses the folder and changes nothing in it;
    the same ranks again are simply written over."""
    ranks = tmp_path / "ranks"
    assert _cli("export", "--chrome", FIXTURE, str(ranks), "--per-rank").returncode == 0
    for r in (2, 3):
        (ranks / f"rank{r}.json").write_text(f"an earlier export's rank {r}")
    before = {p.name: p.read_bytes() for p in ranks.iterdir()}
    result = _cli("export", "--chrome", FIXTURE, str(ranks), "--per-rank", "--all-iterations")
    assert result.returncode == 2 and result.stderr == (
        f"ddpsim export: error: {ranks} already holds rank2.json, rank3.json, which this 2-rank trace would not "
        "overwrite (HTA would read them as ranks of this run): export into an empty folder or remove them\n")
    assert {p.name: p.read_bytes() for p in ranks.iterdir()} == before
    for r in (2, 3):
        (ranks / f"rank{r}.json").unlink()
    assert _cli("export", "--chrome", FIXTURE, str(ranks), "--per-rank", "--all-iterations").returncode == 0
    named = _cli("export", "--chrome", FIXTURE, str(tmp_path / "pr.json.gz"), "--per-rank")  # a folder so named
    assert named.returncode == 2 and named.stderr.endswith("OUT " + str(tmp_path / "pr.json.gz") + " names a file\n")
    assert not (tmp_path / "pr.json.gz").exists()


STREAMED = [FIXTURE, "ddpsim/samples/04_branchy_torch_find_unused.json",  # the bitmap's allreduce
            "ddpsim/samples/05_convnet_torch_no_sync3.json", "ddpsim/samples/10_h100_resnet18_gloo_2ranks.json"]


@pytest.mark.parametrize("name", STREAMED, ids=lambda n: n.rsplit("/", 1)[-1].removesuffix(".json"))
def test_the_streamed_export_is_the_whole_exports_json_byte_for_byte(tmp_path, capsys, name):
    """``export`` writes its file as it makes it (Note [An export carries its trace]'s trace included): the
    bytes are ``json.dumps`` of the export made whole (``to_chrome``, ``to_kineto``), gzipped as
    ``gzip.compress(mtime=0)`` under a .gz name, and what it carries is the trace's ``to_dict()``."""
    import gzip

    from ddpsim.cli import main as cli
    from ddpsim.trace.export import steady_iterations

    trace = load_trace(ROOT / name)
    keep = steady_iterations(trace) or None
    whole = to_chrome(trace)
    assert whole["ddpsimTrace"] == trace.to_dict()
    text = json.dumps(whole).encode()
    assert cli(["export", "--chrome", str(ROOT / name), str(tmp_path / "x.json")]) == 0
    assert cli(["export", "--chrome", str(ROOT / name), str(tmp_path / "x.json.gz")]) == 0
    assert (tmp_path / "x.json").read_bytes() == text
    assert (tmp_path / "x.json.gz").read_bytes() == gzip.compress(text, mtime=0)
    assert f": {len(whole['traceEvents'])} events;" in capsys.readouterr().out
    assert cli(["export", "--chrome", str(ROOT / name), str(tmp_path / "ranks"), "--per-rank"]) == 0
    lowest = min(r.rank for r in trace.ranks)
    for r in trace.ranks:
        want = json.dumps(to_kineto(trace, r.rank, keep, carry=r.rank == lowest)).encode()
        assert (tmp_path / "ranks" / f"rank{r.rank}.json").read_bytes() == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks", "x.json", "x.json.gz"]  # no temporary file


def test_chunks_write_what_json_dumps_writes():
    """A hand-made object, its arrays made as written: empty ones, empty batches, nesting, keys json converts
    (numbers, booleans, None), text json escapes, floats."""
    from ddpsim.trace.export_write import Array, chunks, whole

    def make():
        return {"a": Array(iter([[1, 2.5], [], [{"x": "é\n", 3: None}]])), "empty": Array(iter([[], []])),
                "none": Array(iter([])), 1: [Array(iter([["s"]])), {"deep": Array(iter([[[1, [2]]]]))}],
                False: (1, 2), None: float("inf"), "plain": {"k": [1.0, -0.0, 1e300]}}

    assert "".join(chunks(make())) == json.dumps(whole(make())) == json.dumps(
        {"a": [1, 2.5, {"x": "é\n", 3: None}], "empty": [], "none": [], 1: [["s"], {"deep": [[1, [2]]]}],
         False: [1, 2], None: float("inf"), "plain": {"k": [1.0, -0.0, 1e300]}})
    counted = make()
    "".join(chunks(counted))
    assert (counted["a"].count, counted["empty"].count, counted["none"].count) == (3, 0, 0)


@pytest.mark.parametrize("gz", [False, True], ids=["json", "gz"])
def test_a_stream_that_fails_midway_leaves_the_old_file_and_no_part_of_one(tmp_path, gz):
    """The text is written to a temporary file as it is made; an exception while making it (after a first
    buffer reached the disk) removes the temporary file and keeps the old one whole."""
    from ddpsim.trace.writer import BUFFER, write_chunks

    out = tmp_path / ("out.json.gz" if gz else "out.json")
    out.write_text("the previous export")

    def pieces():
        yield "x" * (2 * BUFFER)
        raise RuntimeError("the trace ran out")

    with pytest.raises(RuntimeError, match="ran out"):
        write_chunks(pieces(), out)
    assert [p.name for p in tmp_path.iterdir()] == [out.name] and out.read_text() == "the previous export"
