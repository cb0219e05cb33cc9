"""Run a function on N real gloo ranks (separate processes) and collect what each returns.

    results = run_ranks(fn, world_size=2, args=(...,), timeout=120)
    results = run_ranks(fn, 2, start_method="spawn")  # each rank a fresh interpreter (the grader)

``fn(rank, world_size, *args)`` must be a picklable top-level function; it runs after
``init_process_group("gloo")`` through a FileStore in a private folder (no port: two runs cannot
race for one), gloo's sockets on loopback, and ``torch.set_num_threads(1)``, on the CPU with the GPUs
hidden (``setup(rank)``, if given, runs before that: pinning to a core, environment). Its return
value (picklable) is rank ``rank``'s result. If a rank raises, dies or the timeout passes, every
rank is stopped and ``RankFailure`` names the rank and why (the cause, not a peer that lost it),
with its traceback (``not_implemented`` is set when it raised NotImplementedError, so a grader
can say so in one line). Used by the autograder, the tests and the calibration.

Note [Ranks forked from a server that imported torch]: a spawned rank starts a new interpreter and
imports torch, 2 CPU-seconds each, more than most ranks' work here. By default the ranks are forked
from multiprocessing's forkserver instead, which imports torch once (``set_forkserver_preload``;
``torchcompat.RANK_PRELOAD``: with what DDP's constructor imports) and has used none of it, so
nothing is held at the fork. A forked rank inherits the server's state from when it started: its
environment (the caller's of now is put in place before ``fn``, ``args`` and ``setup`` are
unpickled, so their modules import under it), what torch read from the environment at import
(``TORCH_DISTRIBUTED_DEBUG`` is read again), and Python's hash seed, the same on every rank. Spawn,
where each rank hashes strings its own way as under torchrun, is for code under test whose ranks
must not agree by accident: the autograder uses it (a student's buckets ordered by iterating a set
of names).

Note [A forked rank dies with its caller]: a forked rank is the server's child, not the caller's,
so PR_SET_PDEATHSIG (``die_with_parent``) follows the server. The server exits when every holder of
its "alive" pipe's write end has closed it: the process that started it and, since multiprocessing
hands that end to each process it forks, every rank. So a rank closes its copy first
(``release_forkserver``): when the caller dies, even by SIGKILL, the server sees the pipe close
and exits at once (``forkserver_exit.py``), and the kernel kills the ranks (tests/test_ranks.py).
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import pickle
import queue
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from pathlib import Path

from ddpsim.mainscript import script_hidden


class RankFailure(RuntimeError):
    """A rank raised, died or timed out; ``.rank`` and ``.error`` say which and why."""

    def __init__(self, rank: int, error: str, not_implemented: str | None = None, summary: str | None = None):
        last = error.strip().splitlines()[-1] if error.strip() else error
        self.summary = summary or last  # one line: the exception's type and reason, where the rank sent them
        super().__init__(f"rank {rank} failed: {self.summary}")
        self.rank, self.error, self.not_implemented = rank, error, not_implemented


def _one_line(e: BaseException) -> str:
    """The exception's type and the first line of its message (torch's messages can run on for
    lines, with C++ or TorchScript frames after the reason)."""
    lines = str(e).strip().splitlines()  # (not errors.first_line: shared ideas do not import each other)
    return f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__


def loopback_interface() -> str:
    """The name of the loopback interface (``lo`` on Linux), for GLOO_SOCKET_IFNAME."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return "lo"
    return next((n for n in names if n == "lo"), next((n for n in names if n.startswith("lo")), "lo"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(payload, rank, world_size, store, results, environ):
    try:
        release_forkserver()  # Note [A forked rank dies with its caller]
        die_with_parent()
        os.environ.clear()
        os.environ.update(environ)  # Note [Ranks forked from a server that imported torch]
        fn, args, setup = pickle.loads(payload)
        if setup is not None:
            setup(rank)
        import torch
        import torch.distributed as dist

        if hasattr(dist, "set_debug_level_from_env"):
            dist.set_debug_level_from_env()

        torch.set_num_threads(1)
        dist.init_process_group("gloo", store=dist.FileStore(store, world_size), rank=rank,
                                world_size=world_size)  # Note [No port on the network] in record/process.py
        out = fn(rank, world_size, *args)
        dist.barrier()
        results.put((rank, True, out, None, None))
    except NotImplementedError as e:
        results.put((rank, False, traceback.format_exc(), str(e) or "a TODO is left", _one_line(e)))
    except BaseException as e:  # noqa: BLE001 - report everything, including KeyboardInterrupt
        results.put((rank, False, traceback.format_exc(), None, _one_line(e)))
    finally:
        results.close()
        results.join_thread()  # the result is flushed to the parent
        os._exit(0)  # skip gloo teardown at exit (see ddpsim/record/worker.py exit_now)


def run_ranks(fn, world_size: int = 2, args: tuple = (), timeout: float = 120.0, setup=None,
              start_method: str = "forkserver") -> list:
    """Run ``fn`` on ``world_size`` gloo ranks; the per-rank results as a list. ``start_method``:
    "forkserver" or "spawn" (Note [Ranks forked from a server that imported torch])."""
    ctx = process_context(start_method)
    results = ctx.Queue()
    payload = pickle.dumps((fn, args, setup))
    procs, outs, deadline = [], {}, time.monotonic() + timeout
    folder = private_folder("ranks")  # the ranks' FileStore: no port to race for
    try:
        with _gpus_hidden():  # CPU ranks see no GPU: Note [CPU ranks see no GPU] in record/placement.py
            environ = dict(os.environ)
            environ.setdefault("GLOO_SOCKET_IFNAME", loopback_interface())  # gloo's sockets on loopback
            for r in range(world_size):
                p = ctx.Process(target=_entry, args=(payload, r, world_size, os.path.join(folder, "store"),
                                                     results, environ), daemon=True)
                with script_hidden(needed=b"__main__" in payload):  # Note [A rank runs none of the caller's script]
                    p.start()
                procs.append(p)  # started: _stop can join it
        while len(outs) < world_size:
            try:
                rank, ok, value, ni, summary = results.get(timeout=0.2)
            except queue.Empty:
                _check_alive(procs, outs, results, deadline, timeout)
                continue
            if not ok:
                raise _root_cause(RankFailure(rank, value, ni, summary), procs, outs, results)
            outs[rank] = value
        return [outs[r] for r in range(world_size)]
    finally:
        try:
            _stop(procs, grace=5.0 if len(outs) == world_size else 0.0)
        finally:
            results.close()
            shutil.rmtree(folder, ignore_errors=True)


STALE_S = 3600.0  # s: a private folder this old whose caller is gone is removed (private_folder)


def private_folder(kind: str) -> str:
    """A new folder ``ddpsim-KIND-PID-*`` (0700) in the temporary folder for the ranks' FileStore, after
    removing this user's whose caller died without cleaning up (SIGKILL; SIGTERM to a process that does
    not unwind), older than ``STALE_S`` (a caller in another PID namespace sharing it looks gone)."""
    for folder in Path(tempfile.gettempdir()).glob(f"ddpsim-{kind}-*-*"):
        pid = folder.name.split("-")[2]
        try:
            st = folder.stat()
            if pid.isdigit() and st.st_uid == os.getuid() and time.time() - st.st_mtime > STALE_S \
                    and not running(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass
    return tempfile.mkdtemp(prefix=f"ddpsim-{kind}-{os.getpid()}-")


def running(pid: int) -> bool:
    """Whether process ``pid`` exists (someone else's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_context(start_method: str):
    """A forkserver that imported torch (Note [Ranks forked from a server that imported torch]),
    or spawn: asked for, or where there is no forkserver."""
    if start_method not in ("forkserver", "spawn"):
        raise ValueError(f"start_method must be 'forkserver' or 'spawn', not {start_method!r}")
    return (start_method == "forkserver" and forkserver_context()) or mp.get_context("spawn")


def forkserver_context():
    """multiprocessing's forkserver, set to import torch when it starts (Note [Ranks forked from a
    server that imported torch]); None where there is none. One per process: run_ranks' ranks and
    the recorder's (``ddpsim/record/forked.py``) are forked from it."""
    if "forkserver" not in mp.get_all_start_methods():
        return None
    from ddpsim.torchcompat import RANK_PRELOAD  # torch, and what DDP's constructor imports

    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*RANK_PRELOAD, "ddpsim.forkserver_exit"])  # read when the server starts
    return ctx


def release_forkserver() -> None:
    """In a process the forkserver forked: close its copy of the server's "alive" pipe (Note [A
    forked rank dies with its caller]; ``_forkserver_alive_fd`` is multiprocessing's private name,
    looked up with care). Nothing to do in a process started otherwise."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no rank is orphaned."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # a C library without prctl
            return
        if os.getppid() == 1:  # the parent died before prctl
            os._exit(1)


@contextlib.contextmanager
def _gpus_hidden():
    """CUDA_VISIBLE_DEVICES empty while the ranks start (given to them; a server started now keeps it)."""
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        yield
    finally:
        if old is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def _check_alive(procs, outs, results, deadline, timeout) -> None:
    """Raise if a rank exited without a result (after a last look for it) or time is up."""
    for rank, p in enumerate(procs):
        if rank not in outs and p.exitcode is not None:
            try:  # its message may still be in flight
                rank2, ok, value, ni, summary = results.get(timeout=1.0)
            except queue.Empty:
                raise RankFailure(rank, _exited(p.exitcode)) from None
            if not ok:
                raise _root_cause(RankFailure(rank2, value, ni, summary), procs, outs, results)
            outs[rank2] = value
            return
    if time.monotonic() > deadline:
        raise RankFailure(-1, f"timed out after {timeout:.0f} s (a rank hangs: waiting for a bucket that never launches?)")


PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")  # gloo, a peer gone
ABORT_HINT = "often gloo's abort on a collective mismatch: the ranks allreduced other sizes or in another order"


def _root_cause(failure: RankFailure, procs, outs, results, wait_s: float = 5.0) -> RankFailure:
    """A rank that failed because a peer went away names the peer, where one died or failed in the next
    ``wait_s``: the first to report is often the survivor ("Connection reset by peer")."""
    if not any(p in failure.summary for p in PEER_GONE):
        return failure
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:  # a rank's own error first, then a rank that died
            rank, ok, value, ni, summary = results.get(timeout=0.1)
            if not ok and not any(p in (summary or "") for p in PEER_GONE):
                return RankFailure(rank, value, ni, summary)
        except queue.Empty:
            pass
        for rank, p in enumerate(procs):
            if rank != failure.rank and rank not in outs and p.exitcode is not None and p.exitcode < 0:
                why = _exited(p.exitcode)
                return RankFailure(rank, why + f"; rank {failure.rank} then lost it: {failure.summary}", summary=why)
    return failure


def _exited(code: int) -> str:
    """Why a rank process ended without a result, from its exit code (negative: the signal)."""
    if code >= 0:
        return f"process exited with code {code} without a result"
    name = next((s.name for s in signal.Signals if s == -code), str(-code))
    return f"died from signal {name}" + (f" ({ABORT_HINT})" if name == "SIGABRT" else "")


def _stop(procs, grace: float) -> None:
    """Wait ``grace`` s for the ranks to exit, then kill the ones left (ours, by handle)."""
    end = time.monotonic() + grace
    for p in procs:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
