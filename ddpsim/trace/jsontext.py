"""JSON text parsed within limits (Note [A strict reader] in reader.py): the nesting depth and the
length of integers are bounded before and while parsing, so a file of brackets or a 5,000-digit number
is one TraceFormatError, not a RecursionError, and the scan is linear in the text."""
from __future__ import annotations

import json
import math
import re
import zlib
from typing import Any

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


def loads_limited(text: str, name: str) -> Any:
    """``json.loads`` of a trace's text, every failure one TraceFormatError naming ``name``."""
    depth, unclosed = _scan(text)
    if depth > MAX_DEPTH:
        raise TraceFormatError(f"{name} nests JSON {depth} levels deep; a trace needs at most {MAX_DEPTH}")
    try:
        raw = json.loads(text, parse_int=lambda s: _int(s, name), parse_float=lambda s: _float(s, name),
                         parse_constant=lambda c: _constant(c, name))
    except json.JSONDecodeError as e:
        # the parser ran out of text (not into a wrong character): a string or a bracket left open at the end
        if unclosed and (e.msg.startswith("Unterminated string") or not text[e.pos:].strip()):
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


def _constant(c: str, name: str):
    raise TraceFormatError(f"{name} holds {c}, which is not a JSON number")


# A complete JSON string, or (group 1 kept: one quote) a string the text ends inside. Every quote
# outside a string starts a match that succeeds, so the scan never restarts at the quotes inside
# an unterminated string: linear time (retrying there made 40,000 escaped quotes take 13 s).
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|(")(?:[^"\\]|\\.)*\\?\Z')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def _scan(text: str) -> tuple[int, bool]:
    """(deepest bracket nesting, True if the text stops inside a string or with brackets still open).

    Strings are removed first (in C, by the regular expression), then the depth is the
    largest running sum of the brackets left, so a 100 MB trace scans in well under a second.
    """
    import numpy as np

    bare = _STRING.sub(r"\1", text)  # strings removed; an unterminated one leaves its quote
    brackets = np.frombuffer(_NOT_BRACKET.sub("", bare).encode(), dtype=np.uint8)
    if not len(brackets):
        return 0, '"' in bare
    depth = np.cumsum(np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1))
    return int(depth.max()), '"' in bare or int(depth[-1]) > 0


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
