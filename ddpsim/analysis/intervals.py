"""Interval arithmetic on (start, end) spans in nanoseconds: one implementation for every analysis."""
from __future__ import annotations


def union_ns(spans) -> int:
    """Total length covered by ``spans`` (overlaps counted once)."""
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total, end = total + (e - s), e
        elif e > end:
            total, end = total + (e - end), e
    return total


def covered_ns(spans, lo: int, hi: int) -> int:
    """Length of [lo, hi] covered by ``spans``."""
    return union_ns((max(lo, s), min(hi, e)) for s, e in spans if e > lo and s < hi)


def covered_fraction(spans, lo: int, hi: int) -> float:
    """Fraction of [lo, hi] covered by ``spans`` (0 for an empty interval)."""
    return covered_ns(spans, lo, hi) / (hi - lo) if hi > lo else 0.0


def merged(spans, gap_ns: int = 1) -> list[tuple[int, int]]:
    """``spans`` as disjoint spans in time order, those less than ``gap_ns`` apart joined (by default
    those that overlap or meet)."""
    out: list[list[int]] = []
    for s, e in sorted(spans):
        if out and s - out[-1][1] < gap_ns:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]

