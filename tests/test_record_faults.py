"""Bad input and failing ranks: one clear line, nothing left running, nothing lost."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, live_pids
from faultinject import UNPINNED, FaultClock
from ddpsim import load_trace
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import RecordError, record

FAULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_models.py")


def cli(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "ddpsim", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["--model", "resnet9000"], "unknown model 'resnet9000'"),
    (["--bucket-cap-mb", "-1", "--find-unused-parameters"], "a negative bucket cap (-1 MiB) with find_unused"),
    (["--bucket-cap-mb-list", "1", "-1"], "--bucket-cap-mb-list entries must be >= 0 MiB"),
    (["--bucket-cap-mb-list", "1", "--impl", "naive"], "--bucket-cap-mb-list needs --impl torch or minddp"),
    (["--world-size", "0"], "--world-size must be >= 1"),
    (["--uneven", "-1"], "--uneven must be >= 0"),
    (["--static-graph", "--no-sync-every", "2"], "static_graph with no_sync every 2 steps: torch's DDP fails"),
    (["--iters", "many"], "invalid int value: 'many'"),
    (["--model", "nowhere/model.py:make"], "model file nowhere/model.py does not exist"),
    (["--model", "tests/comm_hook_user.py:"], "names no function after ':': give tests/comm_hook_user.py:factory"),
])
def test_bad_input_is_one_line_and_starts_nothing(tmp_path, args, message):
    out = tmp_path / "run.json"
    result = cli("record", "--out", str(out), *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == [], "no rank was started, nothing was written"


@pytest.mark.slow
@pytest.mark.parametrize("factory, cause", [("raising_factory", "RuntimeError: injected failure"),
                                            ("dying_factory", "died from signal SIGKILL")])
def test_a_failing_rank_stops_the_run_cleanly(tmp_path, factory, cause):
    cfg = RecordConfig(model=f"{FAULTS}:{factory}", world_size=2, iters=6, timeout_s=20, pin_cpus=UNPINNED)
    with FaultClock(tmp_path / "run.json", rank=1, count=2) as clock, pytest.raises(RecordError) as err:
        record(cfg, tmp_path / "run.json")  # rank 1 fails in its third iteration's batch
    message = str(err.value)
    assert "rank 1" in message and cause in message and "\n" not in message
    after = clock.seconds_since_fault()  # rank 1's second iteration written -> every rank gone
    assert after is not None and after < cfg.timeout_s, f"the run did not wait out the timeout: {after} s"
    trace = load_trace(tmp_path / "run.json")  # shards so far, merged and kept
    assert not trace.complete
    by_rank = {r.rank: r for r in trace.ranks}
    assert cause.split(":")[0] in by_rank[1].error
    assert [it.iteration for it in by_rank[1].iterations] == [0, 1]  # what rank 1 wrote before it failed
    # rank 0 wrote iteration 0 before it joined iteration 1's allreduce, which rank 1 completed; whether it
    # wrote iteration 1 before it was stopped is a race
    assert [it.iteration for it in by_rank[0].iterations][:1] == [0]
    assert (tmp_path / "run.json.rank0.jsonl").exists(), "the raw shards are kept too"
    assert f"raw shards in {tmp_path / 'run.json'}.rank*.jsonl;" in message  # and the message names them
    pids = [r.pid for r in trace.ranks]
    assert live_pids(pids) == [], "no orphan rank processes"


@pytest.mark.slow
def test_branchy_without_find_unused_explains_itself(tmp_path):
    cfg = RecordConfig(model="branchy", world_size=2, iters=4, timeout_s=20, pin_cpus=UNPINNED)
    start = time.monotonic()
    with pytest.raises(RecordError) as err:
        record(cfg, tmp_path / "run.json")
    message = str(err.value)
    assert time.monotonic() - start < cfg.timeout_s + 10, "it does not hang"
    assert "got no gradient" in message and "branch" in message
    assert "--find-unused-parameters" in message and "\n" not in message
    # the partial trace it keeps is not a network problem: simulating it says the run failed, with or without one
    for extra in ([], ["--bandwidth-gbps", "10"]):
        result = cli("simulate", "--trace", str(tmp_path / "run.json"), *extra)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr
        assert "the recording failed before any bucket's allreduce (rank" in lines[0], lines
    trace = load_trace(tmp_path / "run.json")
    assert live_pids([r.pid for r in trace.ranks]) == []


@pytest.mark.slow
def test_busy_port_is_replaced_by_a_free_one(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        trace = record(RecordConfig(model="mlp", iters=2), tmp_path / "run.json", master_port=port)
    assert trace.complete
    assert int(trace.ranks[0].ddp_logging_data["master_port"]) != port


@pytest.mark.slow
def test_only_no_sync_steps_is_a_good_run_with_a_note(tmp_path):
    """--iters 2 --no-sync-every 4: every step accumulates; the trace is written and the exit status is 0."""
    out = tmp_path / "run.json"
    result = cli("record", "--model", "mlp", "--world-size", "2", "--iters", "2", "--no-sync-every", "4",
                 "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "no synced iteration" in result.stdout
    trace = load_trace(out)
    assert trace.complete and [it.sync for it in trace.ranks[0].iterations] == [False, False]


def test_a_signal_death_is_a_cause_whatever_its_last_line_says():
    """gloo in torch 2.10 logs 'connected to 1 peer ranks' at start-up: the killed rank's last line."""
    from ddpsim.record.explain import is_secondary, root_cause

    killed = "died from signal SIGKILL; last output: [Gloo] Rank 1 is connected to 1 peer ranks."
    survivor = "RuntimeError: [gloo/transport/tcp/pair.cc:538] Read error: Connection reset by peer"
    assert is_secondary(survivor) and not is_secondary(killed)
    assert root_cause({0: survivor, 1: killed}) == (1, killed)


def test_a_type_error_is_a_cause_not_a_peer():
    """'peer' (a survivor's "Connection reset by peer") is a word: "TypeError" holds 'peEr' but is a cause."""
    from ddpsim.record.explain import is_secondary

    assert not is_secondary("TypeError: _TwoInputs.forward() missing 1 required positional argument: 'mask'")
    assert is_secondary("RuntimeError: Connection closed by peer [127.0.0.1]:1234")


@pytest.mark.slow
def test_a_forward_called_wrongly_names_the_type_error(tmp_path):
    cfg = RecordConfig(model=f"{FAULTS}:wrong_forward_factory", world_size=2, iters=3, timeout_s=20, pin_cpus=UNPINNED)
    with pytest.raises(RecordError) as err:
        record(cfg, tmp_path / "run.json")
    message = str(err.value)
    assert "failed: TypeError" in message and "missing 1 required positional argument: 'mask'" in message, message
    assert "collective" not in message and "\n" not in message


def test_a_folder_as_output_is_refused_before_any_rank_starts(tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    result = cli("record", "--iters", "2", "--out", str(folder))
    assert result.returncode == 2 and "error: the output" in result.stderr.strip().splitlines()[-1], result.stderr
    assert "is a folder: name a trace file" in result.stderr
    assert list(tmp_path.iterdir()) == [folder] and list(folder.iterdir()) == [], "no rank was started"


@pytest.mark.slow
def test_a_recording_that_records_nothing_keeps_an_earlier_trace(tmp_path):
    """A run that fails before its first iteration does not replace a trace already at its output
    with an empty partial one (a good recording was lost that way)."""
    out = tmp_path / "keep.json"
    out.write_text((ROOT / "tests" / "fixtures" / "tiny_trace.json").read_text())
    before = out.read_bytes()
    bad = tmp_path / "bad.py"
    bad.write_text("def factory():\n    raise RuntimeError('no model today')\n")
    result = cli("record", "--model", f"{bad}:factory", "--iters", "2", "--out", str(out), timeout=120)
    assert result.returncode == 2 and "no model today" in result.stderr, result.stderr
    assert f"{out} left as it was" in result.stderr and out.read_bytes() == before
    fresh = tmp_path / "fresh.json"  # a new output: each rank's fate is kept, not called a partial trace
    result = cli("record", "--model", f"{bad}:factory", "--iters", "2", "--out", str(fresh), timeout=120)
    assert f"no iteration recorded; each rank's fate kept in {fresh}" in result.stderr, result.stderr
    assert "partial trace" not in result.stderr and not any(r.iterations for r in load_trace(fresh).ranks)


@pytest.mark.slow
def test_ctrl_c_keeps_what_was_recorded(tmp_path):
    """Ctrl-C (SIGINT to the terminal's process group) stops every rank and merges what they recorded
    into the output, marked incomplete, and says where; it used to leave only the raw shards."""
    from devtools import group_alive

    out = tmp_path / "run.json"  # an earlier recording there is not replaced by the partial one
    out.write_text((ROOT / "tests" / "fixtures" / "tiny_trace.json").read_text())
    before, partial = out.read_bytes(), tmp_path / "run.partial.json"
    # A terminal's foreground job takes SIGINT; a job started with `&` from a script inherits it ignored
    # (POSIX), its children too, and no Ctrl-C reaches them: the record starts as from a terminal.
    proc = subprocess.Popen([sys.executable, "-m", "ddpsim", "record", "--iters", "600", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        shard = tmp_path / "run.json.rank0.jsonl"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (not shard.exists() or shard.read_text().count('"iteration"') < 3):
            time.sleep(0.2)
        seen = shard.read_text().count('"kind":"iteration"') if shard.exists() else None
        os.killpg(proc.pid, signal.SIGINT)
        stdout, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    why = f"exit {proc.returncode}, {seen} iterations in rank 0's shard at the interrupt; stdout {stdout!r}; stderr {err!r}"
    assert proc.returncode == 130 and f"partial trace kept in {partial}" in err.strip().splitlines()[-1], why
    assert f"raw shards in {out}.rank*.jsonl;" in err.strip().splitlines()[-1], why  # named: they stay beside it
    assert out.read_bytes() == before
    trace = load_trace(partial)
    assert not trace.complete and len(trace.ranks[0].iterations) >= 2
    deadline = time.monotonic() + 10
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group_alive(proc.pid) == [], "no rank left running"


def test_an_interrupt_before_any_iteration_writes_nothing(tmp_path):
    """Ctrl-C during start-up: no rank wrote anything, so there is no partial trace to announce."""
    from ddpsim.record.failure import interrupted

    out = tmp_path / "run.json"
    shards = [[tmp_path / f"run.json.rank{r}.jsonl" for r in range(2)]]
    assert interrupted(RecordConfig(world_size=2), [out], shards, tmp_path / "logs") is None
    assert list(tmp_path.iterdir()) == []
