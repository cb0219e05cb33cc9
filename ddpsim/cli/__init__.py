"""The command line: ``ddpsim <command>`` (or ``python -m ddpsim <command>``), every command's
front end in one place.

Each command lives in a module with ``HELP`` (one line), ``add_arguments(parser)``
and ``main(args) -> int``: ``record``, ``simulate``, ``scaling``, ``sweep`` and ``import`` in this package,
the others beside the library code they drive (``COMMANDS``). Errors meant for the
user are raised as ``CLIError`` (or ValueError / TraceFormatError) and printed as
one line, with exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from ddpsim.errors import CLIError  # noqa: F401  (re-exported for commands)

# command name -> module implementing it
COMMANDS = {
    "record": "ddpsim.cli.record",
    "merge": "ddpsim.record.merge",
    "export": "ddpsim.trace.export",
    "import": "ddpsim.cli.profile_import",
    "simulate": "ddpsim.cli.simulate",
    "scaling": "ddpsim.cli.scaling",
    "sweep": "ddpsim.cli.sweep",
    "calibrate": "ddpsim.experiments.calibrate",
    "validate": "ddpsim.experiments.validate",
    "ladder": "ddpsim.experiments.ladder",
    "gpucheck": "ddpsim.experiments.gpucheck",
    "selfcheck": "ddpsim.experiments.selfcheck",
    "published": "ddpsim.experiments.published",
}


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (the full usage is in --help), under the prefix every other
    error has ("ddpsim simulate: error: ..."; the usage line keeps the program as it was started)."""

    def error(self, message):
        prog = self.prog.replace("python -m ddpsim", "ddpsim", 1)
        self.exit(2, f"{prog}: error: {message} (see --help)\n")


def program_name() -> str:
    """``ddpsim`` when started by the installed command, else ``python -m ddpsim`` (the same program)."""
    return "ddpsim" if os.path.basename(sys.argv[0] if sys.argv else "") == "ddpsim" else "python -m ddpsim"


def build_parser(commands: dict[str, str] | None = None) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=program_name(),
                          description="ddpsim: record, re-implement and simulate PyTorch DDP")
    sub = parser.add_subparsers(dest="command", metavar="<command>", required=True,
                                parser_class=OneLineParser)
    for name, module_name in (commands or COMMANDS).items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_main=module.main)
    return parser


def main(argv: list[str] | None = None, commands: dict[str, str] | None = None) -> int:
    args = build_parser(commands).parse_args(argv)
    try:
        return int(args._main(args) or 0)
    except KeyboardInterrupt as e:  # its message, if any, says what was kept (record)
        print(f"ddpsim: interrupted{f'; {e}' if str(e) else ''}", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `ddpsim ... | head`: the reader has gone; quiet, as other commands are
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's own flush at exit fails too
        return 1
    except OSError as e:  # an output or input path: one line naming it, not the raw errno text
        where = f" {e.filename}" if e.filename else ""
        print(f"ddpsim {args.command}: error: cannot use{where}: {e.strerror or e}", file=sys.stderr)
        return 2
    except ValueError as e:  # CLIError and TraceFormatError are ValueErrors
        print(f"ddpsim {args.command}: error: {e}", file=sys.stderr)
        return 2
