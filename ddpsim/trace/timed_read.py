"""Reading a trace under a time limit, for a server that must not be held by one file (the
dashboard's upload): ``parse_trace`` in a child process, given up at the limit."""
from __future__ import annotations

from ddpsim.trace.reader import MAX_TRACE_BYTES, parse_trace
from ddpsim.trace.types import Trace, TraceFormatError


def parse_trace_within(text: str | bytes, seconds: float, name: str = "trace",
                       max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """``parse_trace`` in a child process stopped after ``seconds``: a server (the dashboard's
    upload) is never held by one file. The parse is linear, so a 50 MB trace takes a few seconds;
    the limit is for what nobody has thought of yet. Raises TraceFormatError (one line) at the limit.
    ``max_bytes``: the most text it reads, a gzipped file's once decompressed."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")  # the text is already in memory: no copy through a pipe
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_parse_into, args=(send, text, name, max_bytes), daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(seconds):
            raise TraceFormatError(f"{name} took more than {seconds:g} s to read and was given up")
        ok, result = receive.recv()
    except EOFError:
        raise TraceFormatError(f"{name} could not be read (the reader stopped: code {child.exitcode})") from None
    finally:
        if child.is_alive():
            child.kill()
        child.join()
        receive.close()
    if not ok:
        raise TraceFormatError(result)
    return result


def _parse_into(send, text, name, max_bytes) -> None:
    try:
        send.send((True, parse_trace(text, name=name, max_bytes=max_bytes)))
    except TraceFormatError as e:
        send.send((False, str(e)))
    except Exception as e:  # noqa: BLE001 - reported as one line in the parent
        send.send((False, f"{name} could not be read: {type(e).__name__}: {str(e)[:200]}"))
    finally:
        send.close()
