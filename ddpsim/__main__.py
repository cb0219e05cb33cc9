"""``python -m ddpsim <command>``: the command line (see ``ddpsim.cli``)."""
from __future__ import annotations

import sys

from ddpsim.cli import COMMANDS, build_parser, main  # noqa: F401  (the entry points, by their old names)

if __name__ == "__main__":
    sys.exit(main())
