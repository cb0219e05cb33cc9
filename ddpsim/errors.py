"""Errors that ddpsim reports to the user as one line."""


class CLIError(ValueError):
    """A problem with the user's input (a bad flag value, a missing file)."""
