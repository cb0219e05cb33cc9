"""Durations and changes as the dashboard writes them: milliseconds where an iteration takes less than
ten seconds, seconds beyond (a CPU run simulated at 100,000 ranks takes minutes); a change in percent,
with thousands separators where it is large."""
from __future__ import annotations

from ddpsim.viz.scaling import SECONDS_FROM  # s: at and above this, a duration is written in seconds


def duration(seconds: float, ms_digits: int = 1, sign: str = "") -> str:
    """``seconds`` as "28.5 ms" or, from ten seconds on, "547.3 s"; ``sign="+"``: "+28.5 ms", "-547.3 s"."""
    if abs(seconds) >= SECONDS_FROM:
        return f"{seconds:{sign},.1f} s"
    return f"{seconds * 1e3:{sign}.{ms_digits}f} ms"


def duration_range(lo: float, hi: float) -> str:
    """Two durations in one unit, "126.6–190.2 ms", or "175,367.8–701,295.0 s" where the longer is ten
    seconds or more."""
    if max(abs(lo), abs(hi)) >= SECONDS_FROM:
        return f"{lo:,.1f}–{hi:,.1f} s"
    return f"{lo * 1e3:.1f}–{hi * 1e3:.1f} ms"


def change(fraction: float) -> str:
    """A relative change as "+3.2%", or "+1,924,114%" where it is a thousand percent or more."""
    pct = fraction * 100
    return f"{pct:+.1f}%" if abs(pct) < 1000 else f"{pct:+,.0f}%"


def metric_unit(seconds: float, value: float | None = None) -> tuple[str, float]:
    """(format, scale) for an ``st.metric`` of a duration in an iteration of ``seconds``: ms, or s from ten
    seconds on; ``value`` under a millisecond with two decimals (a GPU run's exposed communication of 0.20 ms
    against 0.12 ms read "0.2 ms" and "0.1 ms", and 0.01 ms read "0.0 ms" beside a caption's "0.01 ms")."""
    if abs(seconds) >= SECONDS_FROM:
        return "{:,.1f} s", 1.0
    return ms_format(value), 1e3


SUB_MS = 1e-3  # s: below this, a metric shows two decimals of a millisecond


def ms_digits(*values: float | None) -> int:
    """The decimals of durations shown in ms beside each other: two where one of ``values`` (seconds;
    None: not shown) is under a millisecond, else one (none given: an iteration time, as ``metric_unit``)."""
    return 2 if any(v is not None and abs(v) < SUB_MS for v in values) else 1


def ms_format(*values: float | None) -> str:
    """The format of durations shown in ms beside each other (``ms_digits``): "{:.1f} ms" or "{:.2f} ms"."""
    return f"{{:.{ms_digits(*values)}f}} ms"
