"""Writing a trace: only what the reader accepts (whatever ddpsim writes, it reads back), and any file
ddpsim writes whole or not at all (``write_text``)."""
from __future__ import annotations

import errno
import json
import os
import tempfile
import zlib
from pathlib import Path
from typing import Iterable

from ddpsim.trace.reader import parse_trace
from ddpsim.trace.types import Trace, TraceFormatError

BUFFER = 1 << 20  # bytes gathered before each write (a write per event would be a million system calls)


def refuse_empty(path, flag: str, what: str = "a file name") -> None:
    """One line for an empty output path, before any work: it names no file (``Path("")`` is the
    current folder, where a folder's files would land)."""
    if path is not None and str(path) == "":
        raise ValueError(f"{flag} wants {what}, not an empty one")


def refuse_input(out, inputs, flag: str = "--out") -> None:
    """One line, before any work, where the output path is one of the command's input files: writing it
    would replace what the command read (a recording replaced by its simulation, a profile by its import)."""
    for given in (i for i in inputs if out is not None and i is not None and str(i)):
        try:
            same = os.path.samefile(out, given)
        except OSError:  # one of them does not exist (yet): nothing would be replaced
            same = False
        if same:
            raise ValueError(f"{flag} {out} is the input {given}: writing it would replace what this command "
                             "reads; give another file")


def refuse_unwritable(path, flag: str, given=None) -> None:
    """One line, before any work, for an output path that cannot be written: a folder by its name, a file
    without write permission, or a folder that takes no new file (found by making a temporary file in it; a
    folder not made yet is judged by the nearest one that exists). ``given``: the path as the user wrote it,
    where ``path`` is one derived from it (a table's OUT.csv)."""
    path, said = Path(path), f"{flag} {path if given is None else given}"
    if path.is_dir():
        raise ValueError(f"{said}: {path} is a folder, not a file")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{said}: {path} cannot be written (no permission)")
    folder = Path(os.path.realpath(path)).parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise ValueError(f"{said}: {folder} is not a folder")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as e:
        raise ValueError(f"{said}: {folder} takes no new file ({e.strerror})") from None


def write_text(text: str, path: str | Path) -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (``write_chunks`` of the one piece)."""
    write_chunks([text], path)


def write_chunks(pieces: Iterable[str], path: str | Path) -> None:
    """Write the text ``pieces`` make (UTF-8) to ``path`` whole or not at all: a temporary file beside it, then
    ``os.replace``; a failure while the pieces are made or written (a full disk, a file-size limit, a kill, an
    exception) leaves the old file, or none, never part of one. A name ending in ``.gz`` is written gzipped as
    ``gzip.compress(data, mtime=0)`` writes it (the reader inflates it); a folder of the path not there yet is
    made. An OSError names ``path`` as given, not the temporary file. The pieces are written as they come, a
    buffer at a time (an export of a long recording: ``export_write.chunks``)."""
    given = str(path)
    if not given:
        raise ValueError("no file to write: the path is empty")
    path = Path(os.path.realpath(path))  # through a symlink to its file, as a shell's > writes: not over the link
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "Is a directory", given)
    if path.exists() and not path.is_file():  # a FIFO or a device: replacing it would remove it
        raise OSError(errno.EINVAL, "not a regular file (ddpsim writes a file whole)", given)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)  # a folder not there yet is made, as every command makes it
        with open(tmp, "wb") as f:
            _write(pieces, f, zlib.compressobj(9, wbits=31) if given.endswith(".gz") else None)
        os.replace(tmp, path)
    except OSError as e:
        why = e.strerror
        if e.errno in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EROFS) and path.parent.is_dir():
            why += f" (its folder {path.parent} takes no new file, which ddpsim writes first to replace it whole)"
        raise OSError(e.errno, why, given) from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # where it could not be made (a read-only folder): the first error is the one to say
            pass


def _write(pieces: Iterable[str], f, gz) -> None:
    """``pieces`` encoded into ``f`` a buffer at a time, through ``gz`` (a zlib gzip stream: level 9, the
    header zlib writes with mtime 0, as ``gzip.compress(data, mtime=0)``) where there is one."""
    buf: list[bytes] = []
    size = 0
    for piece in pieces:
        buf.append(piece.encode("utf-8"))
        size += len(buf[-1])
        if size >= BUFFER:
            data, buf, size = b"".join(buf), [], 0
            f.write(gz.compress(data) if gz else data)
    data = b"".join(buf)
    f.write(gz.compress(data) + gz.flush() if gz else data)


def write_trace_dict(raw: dict, path: str | Path) -> Trace:
    """Write a trace's JSON form, serialized once and read back by the strict reader first; a trace
    the reader would refuse (a size past the bounds, a time out of range) raises TraceFormatError
    and nothing is written. Returns the Trace as a reader of the file would get it."""
    text = json.dumps(raw, separators=(",", ":"))
    try:
        trace = parse_trace(text, name=str(path))
    except TraceFormatError as e:
        raise TraceFormatError(f"not writing {path}: it would not load back ({e})") from None
    write_text(text, path)
    return trace


def save_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as JSON, only if it loads back (``write_trace_dict``)."""
    write_trace_dict(trace.to_dict(), path)
