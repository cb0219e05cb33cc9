"""JSON text parsed within limits (Note [A strict reader] in reader.py): the nesting depth and the
length of integers are bounded before and while parsing, so a file of brackets or a 5,000-digit number
is one TraceFormatError, not a RecursionError, and the scan is linear in the text."""
from __future__ import annotations

import json
import math
import re
import zlib
from typing import Any

import numpy as np

from ddpsim.trace.types import TraceFormatError

MAX_DEPTH = 64  # JSON nesting levels (a trace needs about 8; Python's json recursion ends near 1000)
MAX_INT_DIGITS = 19  # digits of a JSON integer (int64); Python refuses > 4300 with a traceback
MAX_GZIP_MEMBERS = 64  # gzip members read from one file (gzip writes 1; `cat a.gz b.gz` a few)
GZIP_MAGIC = b"\x1f\x8b"
PROFILE_HINT = ("it looks like a Chrome trace (what torch.profiler writes): turn one per rank into a ddpsim "
                "trace with `ddpsim import RANK0.json RANK1.json ... --out run.json`")


def gunzip_limited(data: bytes, max_bytes: int, name: str) -> bytes:
    """The text of a gzipped file (every member), refused past ``max_bytes`` without inflating the
    rest: a small file cannot fill the memory. A profiler trace too large says how to import it."""
    chunks, size, rest = [], 0, data
    for _ in range(MAX_GZIP_MEMBERS):  # each member copies the rest once: a bounded count keeps it linear
        if rest[:2] != GZIP_MAGIC:
            return b"".join(chunks)
        inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            chunks.append(inflate.decompress(rest, max_bytes + 1 - size))
        except zlib.error as e:
            raise TraceFormatError(f"{name} is not a valid gzip file: {e}") from None
        size += len(chunks[-1])
        if size > max_bytes:
            hint = f"; {PROFILE_HINT}" if b'"traceEvents"' in chunks[0][:1 << 16] else ""
            raise TraceFormatError(f"{name} holds more than {max_bytes / 2**20:.0f} MiB of text once "
                                   f"decompressed; the limit is {max_bytes / 2**20:.0f} MiB{hint}")
        if not inflate.eof:
            raise TraceFormatError(f"{name} is truncated: its gzip data ends early")
        rest = inflate.unused_data
    if rest[:2] == GZIP_MAGIC:
        raise TraceFormatError(f"{name} is more than {MAX_GZIP_MEMBERS} gzip files joined together; "
                               "decompress it first")
    return b"".join(chunks)


def loads_limited(text: str, name: str, unique_keys: bool = True) -> Any:
    """``json.loads`` of a trace's text, every failure one TraceFormatError naming ``name``.

    ``unique_keys``: an object that names a key twice is refused (Note [One key, one value]); a
    PyTorch profile (``kineto.py``) is read as ``json`` reads it, the last value kept."""
    if text.count("[") + text.count("{") > MAX_DEPTH:  # fewer opening brackets cannot nest deeper: no scan
        depth = _scan(text)[0]
        if depth > MAX_DEPTH:
            raise TraceFormatError(f"{name} nests JSON {depth} levels deep; a trace needs at most {MAX_DEPTH}")
    try:
        raw = json.loads(text, parse_int=lambda s: _int(s, name), parse_float=lambda s: _float(s, name),
                         parse_constant=lambda c: _constant(c, name),
                         object_pairs_hook=(lambda pairs: _object(pairs, name)) if unique_keys else None)
    except json.JSONDecodeError as e:
        # the parser ran out of text (not into a wrong character): a string or a bracket left open at the end
        if (e.msg.startswith("Unterminated string") or not text[e.pos:].strip()) and _scan(text)[1]:
            raise TraceFormatError(f"{name} is truncated: the JSON ends early "
                                   f"({e.msg.removesuffix(' at')} at line {e.lineno}, column {e.colno})") from None
        raise TraceFormatError(
            f"{name} is not valid JSON: {e.msg.removesuffix(' at')} at line {e.lineno}, column {e.colno}"
        ) from None
    return raw


def _int(s: str, name: str) -> int:
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise TraceFormatError(f"{name} holds a {len(s.lstrip('-'))}-digit integer; "
                               f"a trace's integers have at most {MAX_INT_DIGITS} digits")
    v = int(s)
    if not -2**63 <= v < 2**63:  # 19 digits reach 9.99e18: int64 is what its exports hold (Perfetto, HTA)
        raise TraceFormatError(f"{name} holds the integer {s}, outside int64")
    return v


def _float(s: str, name: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise TraceFormatError(f"{name} holds {s[:20]}, too large for a number")
    return x


# Note [One key, one value]: JSON leaves an object that names a key twice undefined, and Python's json
# keeps the last value, so a trace with two "meta" objects simulated the second one's world size with no
# word. ddpsim writes each key once, so its traces and shards refuse a repeated key, naming it; the check
# is a Python call per object: loading a 23 MB trace took 1.07x as long (median of six interleaved pairs,
# 0.75-1.27x). A PyTorch profile is another program's output, read as json reads it: no profile seen
# repeats a key (the bundled H100/H200 ones included).
def _object(pairs: list, name: str) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set = set()
        key = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise TraceFormatError(f"{name} names the key {json.dumps(key)[:60]} twice in one object; "
                               "JSON keeps one value per key")
    return obj


def _constant(c: str, name: str):
    raise TraceFormatError(f"{name} holds {c}, which is not a JSON number")


# Note [The depth scan is vectorised]: the scan runs over the text's bytes in numpy, a few passes in
# C per 4 MiB chunk, with no per-character Python and no per-string regular expression (which cost
# 0.5 s for an 11 MB profile, four times the parse). A quote is a string's end or start unless an odd
# run of backslashes precedes it; a bracket counts when an even number of such quotes precede it. A
# backslash outside a string is not JSON: the parser stops there, before any nesting after it, so
# reading it as an escape there too only changes which of two refusals such a text gets (its
# nesting, or "not valid JSON"). Chunks end after a byte that is not a backslash, so a run of
# backslashes and the quote after it are never split.
_SCAN_CHUNK = 1 << 22  # bytes of text per numpy pass (4 MiB): bounds the scan's memory to a few times this
_NOT_BACKSLASH = re.compile(rb"[^\\]")
_BRACKET = np.zeros(256, np.int8)
_BRACKET[[ord("["), ord("{")]], _BRACKET[[ord("]"), ord("}")]] = 1, -1


def _scan(text: str) -> tuple[int, bool]:
    """(deepest bracket nesting, True if the text stops inside a string or with brackets still open);
    linear in the text (Note [The depth scan is vectorised])."""
    data = text.encode("utf-8", "surrogatepass")
    inside, depth, deepest, start = 0, 0, 0, 0
    while start < len(data):
        m = _NOT_BACKSLASH.search(data, min(len(data), start + _SCAN_CHUNK) - 1)
        end = m.end() if m else len(data)
        chunk = np.frombuffer(data, np.uint8, end - start, start)
        quotes, brackets = _string_quotes(chunk), np.flatnonzero(_BRACKET[chunk])
        outside = (np.searchsorted(quotes, brackets) + inside) % 2 == 0
        steps = _BRACKET[chunk[brackets[outside]]].astype(np.int64)
        if len(steps):
            running = depth + np.cumsum(steps)
            deepest, depth = max(deepest, int(running.max())), int(running[-1])
        inside, start = (inside + len(quotes)) % 2, end
    return deepest, bool(inside) or depth > 0


def _string_quotes(chunk: np.ndarray) -> np.ndarray:
    """Positions of the quotes in ``chunk`` that start or end a string: not those after an odd run
    of backslashes."""
    quotes, slashes = np.flatnonzero(chunk == ord('"')), np.flatnonzero(chunk == ord("\\"))
    if not len(quotes) or not len(slashes):
        return quotes
    run_starts = slashes[np.r_[True, np.diff(slashes) != 1]]
    after = quotes[(quotes > 0) & (chunk[np.maximum(quotes - 1, 0)] == ord("\\"))]  # quotes after a backslash
    runs = after - run_starts[np.searchsorted(run_starts, after - 1, "right") - 1]
    return np.setdiff1d(quotes, after[runs % 2 == 1], assume_unique=True)


def json_depth(obj: Any, level: int = 1) -> int:
    """Nesting depth of parsed JSON, without recursion (so a deep object cannot overflow the stack)."""
    deepest, stack = 0, [(obj, level)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest
