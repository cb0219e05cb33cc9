"""``ddpsim.ranks.run_ranks``: real gloo ranks, and a failing rank named in one line."""
import pytest

from distutil import RankFailure, run_ranks
from ddpsim.ranks import STALE_S


def _fails_with_a_long_message(rank, world_size):
    if rank == 1:  # torch's messages can end with frames, not the reason (powerSGD_hook.py, torch 2.11)
        raise ValueError("Expected a cuda device, but got: cpu\n  powerSGD_hook.py(630): decompress")
    import os
    return os.environ["CUDA_VISIBLE_DEVICES"]


@pytest.mark.slow  # real gloo ranks
def test_a_failing_rank_is_named_by_its_exception_and_cpu_ranks_see_no_gpu():
    with pytest.raises(RankFailure) as info:
        run_ranks(_fails_with_a_long_message, 2, timeout=120)
    assert str(info.value) == "rank 1 failed: ValueError: Expected a cuda device, but got: cpu"
    assert "decompress" in info.value.error  # the whole traceback is kept
    assert run_ranks(_fails_with_a_long_message, 1, timeout=120) == [""]


def _mismatched_allreduce(rank, world_size):
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(64 if rank == 0 else 4096))  # the ranks' collectives do not match


def test_a_collective_mismatch_names_the_rank_gloo_aborted_not_the_one_that_lost_it():
    """gloo aborts the rank that receives a mismatched allreduce (C++, SIGABRT); the survivor, reporting
    first, said "Connection reset by peer", which named the wrong rank and no cause."""
    with pytest.raises(RankFailure) as info:
        run_ranks(_mismatched_allreduce, 2, timeout=60)
    assert "died from signal SIGABRT" in info.value.summary and "collective mismatch" in info.value.summary
    assert "Connection reset" not in info.value.summary


def _env_and_hash(rank, world_size):
    import os
    return os.environ.get("DDPSIM_TEST_VALUE"), hash("ddpsim")


@pytest.mark.slow  # real gloo ranks
def test_forked_ranks_see_the_callers_environment_of_now_and_spawned_ones_hash_apart(monkeypatch):
    """Note [Ranks forked from a server that imported torch] in ddpsim/ranks.py."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # set, spawned ranks would share it too
    monkeypatch.setenv("DDPSIM_TEST_VALUE", "first")
    assert [env for env, _ in run_ranks(_env_and_hash, 2, timeout=120)] == ["first", "first"]
    monkeypatch.setenv("DDPSIM_TEST_VALUE", "second")  # the forkserver started under "first"
    forked = run_ranks(_env_and_hash, 2, timeout=120)
    assert [env for env, _ in forked] == ["second", "second"]
    assert forked[0][1] == forked[1][1], "forked ranks share the server's hash seed"
    spawned = run_ranks(_env_and_hash, 2, timeout=120, start_method="spawn")
    assert [env for env, _ in spawned] == ["second", "second"]
    assert spawned[0][1] != spawned[1][1], "each spawned rank hashes strings its own way, as under torchrun"
    with pytest.raises(ValueError, match="start_method must be"):
        run_ranks(_env_and_hash, 2, start_method="fork")


def _listening_now(rank, world_size):
    import os

    from test_record_ports import listening
    return listening(os.getpid())


@pytest.mark.slow  # real gloo ranks
def test_ranks_listen_on_loopback_only():
    """A FileStore, not a TCPStore on a port picked beforehand (which another process could take
    first: EADDRINUSE, seen in CI), and gloo's sockets on loopback."""
    from test_record_ports import check_loopback_only

    check_loopback_only(dict(enumerate(run_ranks(_listening_now, 2, timeout=120))), 2)


CALLER = """import os, sys, time
from ddpsim.ranks import run_ranks

def train(rank, world_size, folder):
    with open(os.path.join(folder, f"rank{rank}.pid"), "w") as f:
        f.write(f"{os.getpid()} {os.getppid()}")
    time.sleep(600)

if __name__ == "__main__":
    run_ranks(train, 2, args=(sys.argv[1],), timeout=900)
"""


@pytest.mark.slow  # real gloo ranks
def test_ranks_and_their_server_die_with_a_killed_caller(tmp_path, monkeypatch):
    """Note [A forked rank dies with its caller] in ddpsim/ranks.py: SIGKILL to the caller alone."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from conftest import child_env
    from devtools import end_group
    from faultinject import alive_after

    (tmp_path / "caller.py").write_text(CALLER)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "caller.py"), str(tmp_path)], cwd=tmp_path,
                            env=child_env(TMPDIR=str(tmp_path)), start_new_session=True)
    try:
        pidfiles = [tmp_path / f"rank{r}.pid" for r in range(2)]
        deadline = time.monotonic() + 120
        while not all(p.exists() and p.read_text() for p in pidfiles) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = {int(pid) for p in pidfiles for pid in p.read_text().split()}  # the ranks and their server
        assert len(left) == 3 and proc.pid not in left, "two ranks forked from one server"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert alive_after(left, 10) == []
        stale = list(tmp_path.glob("ddpsim-ranks-*"))
        assert len(stale) == 1, "the killed caller left its store folder"
        long_ago = time.time() - STALE_S - 1
        os.utime(stale[0], (long_ago, long_ago))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        assert run_ranks(_env_and_hash, 1, timeout=120)[0] is not None
        assert list(tmp_path.glob("ddpsim-ranks-*")) == [], "the next caller removed it, and its own"
    finally:
        end_group(proc, grace_s=0)


@pytest.mark.slow  # real gloo ranks
def test_a_rank_runs_none_of_a_host_script_unless_its_function_lives_there(tmp_path, monkeypatch):
    """Note [A rank runs none of the caller's script] (ddpsim/mainscript.py): Streamlit puts the app's script in
    sys.modules as ``__main__``, and each rank of a measurement started from a page ran the whole app again.
    A function the caller's own script defines still reaches the ranks (they need that script)."""
    import operator
    import subprocess
    import sys
    import types

    from childenv import child_env
    from ddpsim.record.timeslice import time_slice

    app = tmp_path / "app_like.py"
    app.write_text("open(__file__ + '.ran', 'a').write('ran\\n')\n")
    host_main = types.ModuleType("__main__")
    host_main.__file__ = str(app)
    monkeypatch.setitem(sys.modules, "__main__", host_main)  # what streamlit's script runner does
    assert run_ranks(operator.add, 2, timeout=120) == [2, 3]  # fn(rank, world_size)
    time_slice(0.2)  # the measurement's other children: two processes spinning on one core
    assert sys.modules["__main__"] is host_main and not (tmp_path / "app_like.py.ran").exists()
    script = tmp_path / "own.py"
    script.write_text("from ddpsim.ranks import run_ranks\n"
                      "def square(rank, world_size):\n    return rank * rank\n"
                      "if __name__ == '__main__':\n    print(run_ranks(square, 2, timeout=120))\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=180, env=child_env())
    assert result.returncode == 0 and result.stdout == "[0, 1]\n", result.stderr[-2000:]
