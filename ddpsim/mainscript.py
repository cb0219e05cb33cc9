"""Start a child process without running the caller's main script in it (``script_hidden``).

Note [A rank runs none of the caller's script]: multiprocessing (spawn, and forkserver's children)
runs the parent's main script again in each child it starts, as ``__mp_main__``, so that functions
defined there can be unpickled. A rank whose code lives in an importable module needs nothing from
it, and running it does harm: a user's script that calls ``record`` without an
``if __name__ == "__main__":`` guard would start ranks from every rank, which multiprocessing stops
with an error; and under Streamlit, whose script runner puts the app's script in ``sys.modules`` as
``__main__``, each rank of a measurement started from a page ran the whole app outside a Streamlit
server (a banner and hundreds of "missing ScriptRunContext" warnings in the server's log per
measurement, and the app's imports in every rank). So while such a child is started, ``__main__``
is an empty module, which multiprocessing does not re-import. One start at a time (the swap is the
whole process's; ``record_in_turns`` records from several threads); other threads see the empty
module meanwhile: milliseconds, or on the first start, while the server imports torch, seconds.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import types

_STARTING = threading.Lock()  # one start at a time: the __main__ swap is the whole process's


@contextlib.contextmanager
def script_hidden(needed: bool = False):
    """Children started inside run none of the caller's ``__main__`` (Note [A rank runs none of the caller's
    script]); ``needed``: what they unpickle names ``__main__`` (a function the script defines), so it stays."""
    with _STARTING:
        main = sys.modules["__main__"]
        if not needed:
            sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            yield
        finally:
            sys.modules["__main__"] = main
