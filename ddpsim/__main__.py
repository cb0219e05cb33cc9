"""``python -m ddpsim <command>``, or the ``ddpsim`` command an install puts on PATH
(pyproject.toml's ``[project.scripts]``): the command line (see ``ddpsim.cli``).

Note [A command exits without finalizing]: once a command has returned, an interpreter that imported
torch spends most of a second (1-2 CPU-seconds on a busy machine) tearing its modules down, after the
last line is printed and with nothing left to do. ``run`` ends the process the way the interpreter
would, without that: it waits for the threads that are not daemons, runs the exit handlers (the
multiprocessing forkserver's socket folder is removed by one, torch's own run), flushes stdout and
stderr, and calls ``os._exit`` with the command's status (``end_process``; ``python -m ddpsim.grade``
and ``python -m ddpsim.sim`` end the same way). A command that raises (``--help``, an uncaught error)
exits as Python does.
"""
from __future__ import annotations

import sys

from ddpsim.cli import COMMANDS, build_parser, main  # noqa: F401  (the entry points, by their old names)


def _terminate(signum, frame):
    """SIGTERM (``kill``, a group stop) unwinds like Ctrl-C, so that ``finally`` blocks run:
    the recorder stops its ranks and removes its private rendezvous folder."""
    raise KeyboardInterrupt


def run() -> None:
    """The process entry point of both ``python -m ddpsim`` and ``ddpsim``."""
    import signal

    signal.signal(signal.SIGTERM, _terminate)
    end_process(main())


def end_process(code: int | None) -> None:
    """End the process with ``code`` as the interpreter would, less its finalization (Note [A command
    exits without finalizing])."""
    import atexit
    import os
    import threading

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # CPython's, as its own shutdown calls it (no public twin)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away, a closed stream: nothing to deliver
            pass
    os._exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    run()
