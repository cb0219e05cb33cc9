"""Writing a trace: only what the reader accepts (whatever ddpsim writes, it reads back)."""
from __future__ import annotations

import errno
import json
import os
from pathlib import Path

from ddpsim.trace.reader import parse_trace
from ddpsim.trace.types import Trace, TraceFormatError


def write_trace_dict(raw: dict, path: str | Path) -> Trace:
    """Write a trace's JSON form, serialized once and read back by the strict reader first; a trace
    the reader would refuse (a size past the bounds, a time out of range) raises TraceFormatError
    and nothing is written. Returns the Trace as a reader of the file would get it."""
    text = json.dumps(raw, separators=(",", ":"))
    try:
        trace = parse_trace(text, name=str(path))
    except TraceFormatError as e:
        raise TraceFormatError(f"not writing {path}: it would not load back ({e})") from None
    given = str(path)
    path = Path(os.path.realpath(path))  # through a symlink to its file, as a shell's > writes: not over the link
    if path.is_dir():  # named as the user gave it, not as the temporary file beside it
        raise IsADirectoryError(errno.EISDIR, "Is a directory", given)
    if path.exists() and not path.is_file():  # a FIFO or a device: replacing it would remove it
        raise OSError(errno.EINVAL, "not a regular file (a trace is written whole, to a file)", given)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # whole or not at all: a kill mid-write
    try:  # leaves the old file (or none), never half a trace
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as e:  # named as the user gave it, not as the temporary file beside it
        raise OSError(e.errno, e.strerror, given) from None
    finally:
        tmp.unlink(missing_ok=True)
    return trace


def save_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as JSON, only if it loads back (``write_trace_dict``)."""
    write_trace_dict(trace.to_dict(), path)
