"""Writing a trace: only what the reader accepts (whatever ddpsim writes, it reads back)."""
from __future__ import annotations

import json
from pathlib import Path

from ddpsim.trace.reader import from_dict
from ddpsim.trace.types import Trace, TraceFormatError


def save_trace(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as JSON after checking that it loads back; a trace the reader would refuse
    (a size past the bounds, a time out of range) raises TraceFormatError and nothing is written."""
    raw = trace.to_dict()
    try:
        from_dict(json.loads(json.dumps(raw)), name="the trace")
    except TraceFormatError as e:
        raise TraceFormatError(f"not writing {path}: it would not load back ({e})") from None
    Path(path).write_text(json.dumps(raw, separators=(",", ":")))
