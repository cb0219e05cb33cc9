"""A progress bar on stderr for the commands that take a while (``record``'s iterations, ``scaling``'s
world sizes), drawn only where stderr is a terminal: a log or a pipe gets the command's lines alone."""
from __future__ import annotations

import sys

WIDTH = 30  # characters of the bar


def progress_bar(verb: str, unit: str):
    """A ``show(done, total)`` that redraws "VERB [###...] done/total UNIT" in place, ending the line once
    done reaches total; None where stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        filled = WIDTH * done // max(total, 1)
        end = "\n" if done >= total else ""
        print(f"\r{verb} [{'#' * filled}{'.' * (WIDTH - filled)}] {done}/{total} {unit}", end=end, file=sys.stderr,
              flush=True)
    return show
