"""``python -m ddpsim <command>``: the command line.

Each command lives in its own module with ``HELP`` (one line), ``add_arguments(parser)``
and ``main(args) -> int``. Errors meant for the user are raised as ``CLIError`` (or
ValueError / TraceFormatError) and printed as one line, with exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from ddpsim.errors import CLIError  # noqa: F401  (re-exported for commands)

# command name -> module implementing it
COMMANDS = {
    "record": "ddpsim.record.cli",
    "merge": "ddpsim.record.merge",
    "export": "ddpsim.export",
    "import": "ddpsim.profile_import",
    "simulate": "ddpsim.sim.cli",
    "sweep": "ddpsim.sim.sweep_cli",
    "calibrate": "ddpsim.experiments.calibrate",
    "validate": "ddpsim.experiments.validate",
    "ladder": "ddpsim.experiments.ladder",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the full usage is in --help)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m ddpsim",
                          description="ddpsim: record, re-implement and simulate PyTorch DDP")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True,
                                parser_class=OneLineParser)
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._main(args) or 0)
    except KeyboardInterrupt:
        print("ddpsim: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as e:  # CLIError and TraceFormatError are ValueErrors
        print(f"ddpsim {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
