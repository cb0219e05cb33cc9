"""Gzipped files where a ddpsim trace is read (``load_trace``, ``simulate --trace``, the app's upload):
a gzipped trace reads as the trace; a gzipped PyTorch profile (what ``tensorboard_trace_handler``
writes) gets the hint a plain one gets, to run ``ddpsim import``; the inflating stops at the limit."""
import gzip
import subprocess
import sys

import pytest
from streamlit.testing.v1 import AppTest

from conftest import ROOT
from ddpsim import samples
from ddpsim.samples import H100_DIR
from ddpsim.trace import TraceFormatError, load_trace, parse_trace

PROFILE = H100_DIR / "resnet50_nccl_ws1_rank0.kineto.json.gz"
FIXTURES = ROOT / "tests" / "fixtures"
TINY = FIXTURES / "tiny_trace.json"
HINT = "it looks like a Chrome trace (what torch.profiler writes): turn one per rank into a ddpsim trace with `ddpsim import"


def test_a_gzipped_trace_reads_as_the_trace(tmp_path):
    path = tmp_path / "run.json.gz"
    path.write_bytes(gzip.compress(TINY.read_bytes()))
    assert load_trace(path) == load_trace(TINY)
    text = TINY.read_bytes()  # a file of two gzip members, as `cat a.gz b.gz` makes
    assert parse_trace(gzip.compress(text[:100]) + gzip.compress(text[100:])) == load_trace(TINY)


def test_a_gzipped_profile_says_to_import_it():
    with pytest.raises(TraceFormatError, match="not a ddpsim trace") as err:
        load_trace(PROFILE)
    assert HINT in str(err.value)
    result = subprocess.run([sys.executable, "-m", "ddpsim", "simulate", "--trace", str(PROFILE)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert HINT in result.stderr


def test_inflating_stops_at_the_limit():
    spaces = gzip.compress(b" " * (2 << 20))  # 2 MiB in 2 KB
    with pytest.raises(TraceFormatError, match=r"bomb\.gz holds more than 1 MiB of text once decompressed"):
        parse_trace(spaces, name="bomb.gz", max_bytes=1 << 20)
    profile = gzip.compress(b'{"traceEvents": [' + b" " * (2 << 20) + b"]}")  # a large profile: the hint still
    with pytest.raises(TraceFormatError, match="`ddpsim import"):
        parse_trace(profile, name="big.pt.trace.json.gz", max_bytes=1 << 20)
    with pytest.raises(TraceFormatError, match="truncated: its gzip data ends early"):
        parse_trace(gzip.compress(TINY.read_bytes())[:300])
    with pytest.raises(TraceFormatError, match="not a valid gzip file"):
        parse_trace(b"\x1f\x8b" + b"\x00" * 40)


def test_many_gzip_members_are_refused_in_one_line_not_read_in_quadratic_time(tmp_path):
    """Each member copied what was read so far and the rest: 8000 members of 38 bytes took 74 s."""
    from ddpsim.trace.jsontext import MAX_GZIP_MEMBERS

    members = b"".join(gzip.compress(b" ") for _ in range(MAX_GZIP_MEMBERS + 1))
    with pytest.raises(TraceFormatError, match=rf"^many\.gz is more than {MAX_GZIP_MEMBERS} gzip files joined"):
        parse_trace(members, name="many.gz")
    bad = tmp_path / "bad.pt.trace.json.gz"  # a corrupt stream in a profile: one line from the importer too
    bad.write_bytes(gzip.compress(b'{"traceEvents": []}')[:12] + b"\xff" * 30)
    from ddpsim.trace.kineto import read_profile

    with pytest.raises(TraceFormatError, match="is not a JSON"):
        read_profile(bad)


def test_what_ddpsim_writes_under_a_gz_name_is_gzip_and_reads_back(tmp_path, capsys):
    """A .gz output name is written gzipped (it was plain JSON under the name) by every writer of a trace, and
    what was written reads back: export, import of that export, simulate."""
    from ddpsim.cli import main as cli

    trace = load_trace(TINY)
    exported, imported, simulated = tmp_path / "e.json.gz", tmp_path / "i.json.gz", tmp_path / "s.json.gz"
    assert cli(["export", "--chrome", str(TINY), str(exported)]) == 0
    assert cli(["import", str(exported), "--out", str(imported)]) == 0
    assert cli(["simulate", "--trace", str(TINY), "--iters", "3", "--no-calibrate", "--out", str(simulated)]) == 0
    for path in (exported, imported, simulated):
        assert path.read_bytes()[:2] == b"\x1f\x8b", path
    assert load_trace(exported).to_dict() == trace.to_dict() == load_trace(imported).to_dict()
    assert load_trace(simulated).source == "simulated"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.json.gz", "i.json.gz", "s.json.gz"]  # no temporary left


@pytest.fixture
def app(monkeypatch):
    monkeypatch.setenv(samples.ENV_VAR, str(FIXTURES))
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=60).run()


def test_the_app_opens_a_gzipped_trace_and_hints_at_import_for_a_gzipped_profile(app):
    before = app.selectbox(key="ddpsim_source").value  # the first trace of tests/fixtures
    app.file_uploader[0].set_value((PROFILE.name, PROFILE.read_bytes(), "application/gzip")).run()
    assert not app.exception, [e.message for e in app.exception]
    assert len(app.error) == 1 and HINT in app.error[0].value
    assert app.selectbox(key="ddpsim_source").value == before  # the trace open before stays
    app.file_uploader[0].set_value(("run.json.gz", gzip.compress(TINY.read_bytes()), "application/gzip")).run()
    assert not app.exception and not app.error, [e.value for e in app.error]
    assert app.selectbox(key="ddpsim_source").value == "upload: run.json.gz"
