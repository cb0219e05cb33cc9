"""Recording under torchrun: one shard per rank, merged into one trace; on one node, and on
two nodes (two torchrun agents on this machine, on loopback)."""
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from ddpsim import load_trace
from devtools import end_group, free_port, group_alive


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
    assert str(tmp_path) not in out.read_text()  # Note [No paths in a trace]
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


def start_node(node: int, port: int, folder, iters: int) -> subprocess.Popen:
    """One torchrun agent of a 2-node, 2-ranks-per-node job, as the README's multi-node section
    runs it: c10d rendezvous on 127.0.0.1 (node 0's agent hosts its store), the workers' store
    and gloo on loopback, the node named ``node<N>`` (Note [Which ranks share a clock])."""
    folder.mkdir()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
           "--rdzv-conf", f"is_host={int(node == 0)}", "--local-addr", "127.0.0.1", "--max-restarts", "0",
           "-m", "ddpsim", "record", "--model", "mlp", "--iters", str(iters), "--out", "run.json"]
    env = dict(os.environ, DDPSIM_HOST=f"node{node}", GLOO_SOCKET_IFNAME="lo", TMPDIR=str(folder))
    with open(folder / "out.txt", "w") as out, open(folder / "err.txt", "w") as err:
        return subprocess.Popen(cmd, cwd=folder, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def overlap_margins_ns(trace) -> list[int]:
    """For every bucket of every iteration: the earliest completion of its allreduce on any rank
    minus the latest launch. An allreduce completes nowhere before every rank launched it, so on
    a consistent clock each margin is >= 0."""
    margins = []
    for its in zip(*(r.iterations for r in trace.ranks)):
        for same in zip(*(it.buckets for it in its)):
            margins.append(min(b.complete_ns for b in same) - max(b.launch_ns for b in same))
    return margins


@pytest.mark.slow
def test_two_nodes_record_merge_and_share_one_clock(tmp_path):
    port, started = free_port(), time.monotonic()
    agents = [start_node(n, port, tmp_path / f"node{n}", iters=5) for n in (0, 1)]
    try:
        codes = [a.wait(timeout=240) for a in agents]
    finally:
        for a in agents:
            end_group(a, grace_s=3.0)
    elapsed = time.monotonic() - started
    logs = {n: (tmp_path / f"node{n}" / "err.txt").read_text()[-1500:] for n in (0, 1)}
    assert codes == [0, 0], logs
    assert all(group_alive(a.pid) == [] for a in agents), "a rank or agent was left behind"

    # each node wrote the shards of its own two ranks; rank 0's node could not merge alone
    shards = {n: sorted((tmp_path / f"node{n}").glob("run.json.rank*.jsonl")) for n in (0, 1)}
    assert sorted(len(v) for v in shards.values()) == [2, 2]
    said = [(tmp_path / f"node{n}" / "out.txt").read_text() for n in (0, 1)]
    assert sum("gather every node's run.json.rank*.jsonl" in s for s in said) == 1, said
    merged = tmp_path / "merged.json"
    result = subprocess.run([sys.executable, "-m", "ddpsim", "merge", *map(str, shards[0] + shards[1]),
                             "--out", str(merged)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    trace = load_trace(merged)
    assert str(tmp_path) not in merged.read_text()  # Note [No paths in a trace]

    # ranks: 4, two per node, a node's ranks consecutive (torchrun numbers node by node)
    assert trace.complete and trace.world_size == 4 and [r.rank for r in trace.ranks] == [0, 1, 2, 3]
    assert trace.meta["hosts"] == ["node0", "node1"]
    hosts = [r.host for r in trace.ranks]
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3]
    for n in (0, 1):
        assert {f"node{n}"} == {hosts[int(p.name.split(".rank")[1].split(".")[0])] for p in shards[n]}
    # layouts: one bucket at construction, then the same rebuilt layout on every rank (rank 0's)
    layouts = [[(l.kind, l.from_iteration, [(b.params, b.bytes) for b in l.buckets]) for l in r.layouts]
               for r in trace.ranks]
    assert all(lay == layouts[0] for lay in layouts) and [k for k, _, _ in layouts[0]] == ["construction", "rebuilt"]

    # the clock: aligned across the two "hosts" by the barrier estimate; the truth is 0 here
    clock = trace.meta["clock"]
    assert clock["method"] == "barrier"
    # within the rounds' spread, or 1 ms where co-located ranks wake in the same order every round (2 cores)
    assert all(abs(off) <= max(clock["skew_ns"], 1_000_000) for off in clock["offsets_ns"].values()), clock
    for rank in trace.ranks:
        for it in rank.iterations:
            assert all(g.t_ns >= it.backward.start_ns for g in it.grad_ready), (rank.rank, it.iteration)
    margins = overlap_margins_ns(trace)
    assert len(margins) >= 5 and min(margins) >= 0, margins
    print(f"two nodes x 2 ranks: recorded in {elapsed:.1f} s; offsets {clock['offsets_ns']} ns, "
          f"skew {clock['skew_ns']} ns; smallest allreduce overlap {min(margins) / 1e6:.2f} ms")
