"""Errors that ddpsim reports to the user as one line."""


class CLIError(ValueError):
    """A problem with the user's input (a bad flag value, a missing file)."""


class PartialTraceError(ValueError):
    """A valid trace that does not hold what was asked of it (e.g. no synced iteration yet).

    Partial traces are normal: a run stopped before its first iteration, or one that
    only accumulated under no_sync. The message says, in one line, what the trace holds.
    """


def first_line(error: str | None) -> str:
    """An error's first line ("" for none): a rank's gloo message without the Python stack under it."""
    return ((error or "").strip().splitlines() or [""])[0]
