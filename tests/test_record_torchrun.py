"""Recording under torchrun: one shard per rank, merged into one trace."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from ddpsim import load_trace


@pytest.mark.slow
def test_torchrun_writes_shards_that_merge(tmp_path):
    out = tmp_path / "run.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
           "-m", "ddpsim", "record", "--model", "mlp", "--iters", "3", "--out", str(out)]
    tmp = tmp_path / "tmp"  # torchrun's own log folder (torchelastic_*) lands here, not in /tmp
    tmp.mkdir()
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180,
                            env=dict(os.environ, TMPDIR=str(tmp)))
    assert result.returncode == 0, result.stderr[-2000:]
    shards = sorted(tmp_path.glob("run.json.rank*.jsonl"))
    assert [s.name for s in shards] == ["run.json.rank0.jsonl", "run.json.rank1.jsonl"]
    trace = load_trace(out)  # rank 0 merged them (one node)
    assert trace.complete and [r.rank for r in trace.ranks] == [0, 1]
    clock = trace.meta["clock"]
    assert clock["method"] == "shared-clock" and clock["skew_ns"] >= 0

    # The same shards merged by hand, as after a multi-node run.
    merged = tmp_path / "merged.json"
    result = subprocess.run([sys.executable, "-m", "ddpsim", "merge", *map(str, shards), "--out", str(merged)],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(merged.read_text()) == json.loads(out.read_text())


def test_merge_rejects_a_file_that_is_not_a_shard(tmp_path):
    bogus = tmp_path / "bogus.jsonl"
    bogus.write_text('{"hello": 1}\n')
    result = subprocess.run([sys.executable, "-m", "ddpsim", "merge", str(bogus), "--out", str(tmp_path / "o.json")],
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "no header line" in result.stderr and len(result.stderr.strip().splitlines()) == 1
