"""Where a timeline row's "exposed N ms" label goes, so that it covers neither the row's name nor a
bucket-ready mark (``timeline._draw_exposed``). All positions are in the axis's unit (ms)."""
from __future__ import annotations


def place_label(limits: tuple[float, float], start: float, end: float, width: float, char: float,
                head_chars: int, marks: list[float]) -> tuple[str, float, str]:
    """(alignment, x, row: "head" or "ready") of the label of the exposed span ``start``-``end``.

    First choice: the header row, right-aligned at the span's end and clipped to the axes (a long
    span, many ranks, would centre it over the name at the row's left). Where it would run into the
    name (``head_chars`` characters of ``char`` ms each): just after the name in the same row. Where
    that row has no room: the bucket-ready row, beside the marks (``beside_marks``).
    """
    lo, hi = limits
    x = min(end, hi)
    after_name = lo + char * head_chars * 1.25
    if x - width >= after_name:
        return "right", x, "head"
    if after_name + width <= hi:
        return "left", after_name, "head"
    return (*beside_marks(marks, start, end, width, char, limits), "ready")


def beside_marks(marks: list[float], start: float, end: float, width: float, gap: float,
                 limits: tuple[float, float]) -> tuple[str, float]:
    """(alignment, x) of the label in the bucket-ready row: after the exposed span, else before it,
    wherever no bucket-ready mark (``marks``) is under it; else right-aligned at the span's end."""
    lo, hi = limits

    def free(x0, x1):  # a mark is about ``gap`` wide
        return lo <= x0 and x1 <= hi and not any(x0 - gap < m < x1 + gap for m in marks)

    if free(end + 2 * gap, end + 2 * gap + width):
        return "left", end + 2 * gap
    if free(start - 2 * gap - width, start - 2 * gap):
        return "right", start - 2 * gap
    return "right", max(min(end, hi), lo + width)
