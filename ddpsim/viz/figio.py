"""Figure bytes for downloads and caching: PNG or SVG from a matplotlib Figure."""
from __future__ import annotations

import io

from matplotlib.figure import Figure

FORMATS = {"png": "image/png", "svg": "image/svg+xml"}


def figure_bytes(fig: Figure, fmt: str = "png", dpi: int = 110) -> bytes:
    """The figure rendered as ``fmt`` ("png" or "svg"), white background."""
    if fmt not in FORMATS:
        raise ValueError(f"figure format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, facecolor="white")
    return buf.getvalue()
