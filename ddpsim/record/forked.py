"""Recorder ranks forked from a server that imported torch, behind the few ``Popen`` methods the
launcher uses (``pid``, ``poll``, ``send_signal``, ``wait``, ``kill``).

A rank started as ``python -m ddpsim.record.worker`` imports torch first: about 2 CPU-seconds,
more than a short recording's training. Forked from multiprocessing's forkserver, which imported
torch once (``ddpsim.ranks.forkserver_context``, Note [Ranks forked from a server that imported
torch] in ``ddpsim/ranks.py``), a rank starts in milliseconds. What it must not inherit from the
server is set before the worker runs: the launcher's environment for this rank (RANK, the store,
the heartbeat, CUDA_VISIBLE_DEVICES; torch reads these when a process group or CUDA starts, not
at import), ``TORCH_DISTRIBUTED_DEBUG`` read again, and stdin, stdout and stderr: the rank's log.

Note [A forked rank dies with its launcher]: as Note [A forked rank dies with its caller] in
``ddpsim/ranks.py`` says, a rank closes its copy of the server's "alive" pipe first thing
(``ranks.release_forkserver``), and its PR_SET_PDEATHSIG (``process.die_with_parent``) follows the
server, which exits with the launcher: even a SIGKILLed launcher leaves no rank, stopped ones
included (tests/test_record_forked.py). A rank's exit status reaches the
launcher through multiprocessing (``Process.exitcode``: the code, or minus the signal, as
``Popen.returncode``).

Note [Only CPU ranks are forked]: a rank on a GPU is still started as ``python -m
ddpsim.record.worker``. Forking is safe there in principle (the server imported torch but never
initialised CUDA, and CUDA_VISIBLE_DEVICES is read when CUDA starts), but forked ranks have not
run on a GPU machine, and there a rank's start-up is small beside its work.

Note [A rank runs none of the caller's script] (``ddpsim/mainscript.py``): while a rank is started, the
launcher's ``__main__`` is an empty module, which multiprocessing does not run again in the rank.

What else a forked rank has that a started one would not: the launcher's ``sys.argv`` (so
``meta.command`` is the command that called ``record``) and interpreter flags; the hash seed of
the server, the same on every rank (a model that orders its parameters by iterating a set of
strings agrees across ranks here, where started ranks might not); and what torch read from the
environment when the server imported it (``torch.set_num_threads(1)`` in the rank sets the one
that matters). Its ``sys.path`` is the launcher's, with which the launcher checked ``--model``.
Where a rank cannot be forked (no forkserver, a daemonic launcher such as a Pool worker, a server
that does not start), it is started as before.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import weakref

from ddpsim import ranks
from ddpsim.mainscript import script_hidden

_LIVE: "weakref.WeakSet[ForkedRank]" = weakref.WeakSet()  # killed at exit if the launcher left any
_WATCHING = 0  # the pid of the process whose exit kills its ranks left running (_watch_exit)


class ForkedRank:
    """One rank, forked; the part of ``subprocess.Popen``'s interface the launcher uses."""

    def __init__(self, ctx, argv: list[str], env: dict[str, str], log: str):
        self._proc = ctx.Process(target=_rank_main, args=(argv, env, log), name=f"ddpsim rank {env['RANK']}")
        with script_hidden():  # Note [A rank runs none of the caller's script]
            self._proc.start()
        self.pid = self._proc.pid
        self.args, self.started_by = argv, os.getpid()
        _watch_exit()
        _LIVE.add(self)

    def poll(self) -> int | None:
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        if self._proc.exitcode is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self._proc.kill()

    def wait(self, timeout: float | None = None) -> int:
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._proc.exitcode


def _context():
    """The forkserver context, or None where ranks cannot be forked from this process."""
    return None if mp.current_process().daemon else ranks.forkserver_context()  # a daemon has no children


def start_server() -> None:
    """Start the server now, without waiting for it, so that it imports torch while the launcher
    sets up the ranks' folders and files."""
    if _context() is not None:
        from multiprocessing import forkserver

        try:
            forkserver.ensure_running()
        except OSError:  # start_rank meets it again and starts the ranks instead
            pass


def start_rank(argv: list[str], env: dict[str, str], log: str):
    """A ForkedRank running ``ddpsim.record.worker.main(argv)``, or None where the rank cannot be
    forked (the launcher then starts ``python -m ddpsim.record.worker``)."""
    ctx = _context()
    if ctx is None:
        return None
    try:
        return ForkedRank(ctx, argv, env, log)
    except (OSError, EOFError):  # no server (a TMPDIR path too long for its socket, say), or it died
        return None


def _watch_exit() -> None:
    """Have multiprocessing's exit handler call ``_kill_left`` first (once per process)."""
    global _WATCHING
    if _WATCHING != os.getpid():
        from multiprocessing import util

        util.Finalize(None, _kill_left, exitpriority=100)  # run by util._exit_function before it joins
        _WATCHING = os.getpid()


def _kill_left() -> None:
    """Ranks this process started that still run when it exits (its clean-up was cut short) are
    killed, so that multiprocessing's exit handler, which joins its children after running its
    finalizers (this is one), does not wait for them."""
    for rank in list(_LIVE):
        if rank.started_by == os.getpid() and rank.poll() is None:
            rank.kill()


def _rank_main(argv: list[str], env: dict[str, str], log: str) -> None:
    """In the forked rank: the launcher's environment and the log in place, then the worker."""
    os.environ.clear()
    os.environ.update(env)
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(log, os.O_WRONLY | os.O_APPEND)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)
    sys.stdout.reconfigure(line_buffering=True)  # as PYTHONUNBUFFERED for a started rank: the
    sys.stderr.reconfigure(line_buffering=True)  # launcher reads the log's last line on failure
    ranks.release_forkserver()  # Note [A forked rank dies with its launcher]
    _name_process(f"ddpsim rank {env['RANK']}")
    import torch.distributed as dist

    if hasattr(dist, "set_debug_level_from_env"):  # read at import, in the server
        dist.set_debug_level_from_env()
    from ddpsim.record import worker

    worker.main(argv)  # exits the process (os._exit); an exception before its own try exits 1


def _name_process(name: str) -> None:
    """The name ``ps`` and /proc/PID/comm show (Linux, 15 characters): which rank this is."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
        except (OSError, AttributeError):  # a C library without prctl: the name is only for ps
            pass
