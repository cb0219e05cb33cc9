"""``python -m ddpsim <command>``, or the ``ddpsim`` command an install puts on PATH
(pyproject.toml's ``[project.scripts]``): the command line (see ``ddpsim.cli``)."""
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
    sys.exit(main())


if __name__ == "__main__":
    run()
