"""Imported by multiprocessing's forkserver alone, the last of its preloads
(``ranks.forkserver_context``): the server's exit skips the interpreter's finalization.

Note [The forkserver exits at once]: the server exits when its caller does, and the kernel then
kills its ranks (Note [A forked rank dies with its caller] in ``ddpsim/ranks.py``). An interpreter
that imported torch takes 1-2 CPU-seconds to finalize (torch's modules torn down one by one); on a
busy machine that was over ten seconds of ranks left training for a launcher that was gone. The
server holds nothing to flush (it forks ranks, nothing else), so it ends with ``os._exit(0)``,
registered here last and so run first of its exit handlers. A forked rank inherits the handler
but never runs it: multiprocessing ends each child it forks with ``os._exit`` as well
(tests/test_record_forked.py, tests/test_ranks.py).
"""
import atexit
import os

atexit.register(os._exit, 0)
