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


# Note [static_graph's first step must sync]: torch's DDP with static_graph=True passes the first
# iteration's outputs through _DDPSink even under no_sync(), and the sink's backward queues
# delay_all_reduce, whose finalize_backward asserts that the reducer expected this backward's hooks
# (reducer.cpp: "expect_autograd_hooks_ INTERNAL ASSERT FAILED"; torch 2.13). So a run that starts
# with a no_sync step under static_graph fails; ddpsim's no_sync pattern (a sync every N micro-steps)
# always starts with one, so the recorder and the simulator refuse the pair up front.
STATIC_GRAPH_NO_SYNC = ("static_graph with no_sync every {every} steps: torch's DDP fails when static_graph's "
                        "first step runs under no_sync (an INTERNAL ASSERT in reducer.cpp), and the first of "
                        "every {every} steps is a no_sync one: leave out one of the two")
