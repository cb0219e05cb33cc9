"""Colours shared by every ddpsim figure, so a bucket looks the same in every view.

Buckets use the Okabe-Ito palette (safe for the common colour-vision
deficiencies); compute phases use neutral greys so they never compete with the
bucket colours. Bucket ``i`` always gets ``bucket_color(i)``.
"""
from __future__ import annotations

# Okabe & Ito (2008), "Color Universal Design", without black (kept for text).
OKABE_ITO = (
    "#E69F00",  # orange
    "#56B4E9",  # sky blue
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#0072B2",  # blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow (last: the weakest contrast on white)
)

# Compute phases and the non-bucket collectives.
FORWARD = "#D9D9D9"
BACKWARD = "#A6A6A6"
OPTIMIZER = "#6E6E6E"
GRAPH_SEARCH = "#FFFFFF"  # drawn with a dashed dark edge
BITMAP = "#404040"
BUFFERS = "#332288"  # the buffer broadcast at the forward's start (Tol's indigo, not a bucket colour)
BUSY = "#1A1A1A"  # an import's busy compute kernels, a band along the compute bars (busyband.py)
EXPOSED = "#B22222"  # exposed-communication outline/hatch (paired with a hatch, not colour alone)
TEXT = "#1A1A1A"
GRID = "#E8E8E8"


def bucket_color(index: int) -> str:
    """The colour of bucket ``index`` (cycles after seven buckets; labels disambiguate)."""
    return OKABE_ITO[int(index) % len(OKABE_ITO)]


def text_color_on(hex_color: str) -> str:
    """Black or white, whichever reads better on ``hex_color``."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) / 255 for i in (0, 2, 4))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#000000" if luminance > 0.45 else "#FFFFFF"


TRACK_GAP = 0.35  # gap after each rank in the per-rank track figures, in row units


def finish_track_axes(ax, y, yticks, ylabels, xlabel: str, tick_size: float = 9.5) -> None:
    """The shared look of the per-rank track figures: row labels, x label, grid, no box."""
    ax.set_ylim(y - TRACK_GAP / 2, -TRACK_GAP / 2)
    ax.set_yticks(yticks, ylabels, fontsize=tick_size)
    ax.tick_params(axis="y", length=0)
    ax.set_xlabel(xlabel, fontsize=10)
    ax.grid(axis="x", color=GRID, zorder=0.5)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
