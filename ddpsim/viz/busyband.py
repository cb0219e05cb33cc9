"""The GPU's busy compute kernels on a timeline's compute row (an import from a GPU profile).

A trace imported from a GPU profile knows when its compute kernels ran (``Iteration.compute_busy``,
Note [Compute is the GPU's busy kernels] in ddpsim/analysis/metrics.py), and the overlap figure
takes compute to be them. A band along the compute bars shows them: dark where the GPU was busy,
light where it sat idle, and an allreduce under a light stretch was not overlapped with compute.
Kernels last microseconds, less than a pixel: the band shows the busy share of each of ``BINS``
equal slices of the iteration, not the kernels one by one.
"""
from __future__ import annotations

from matplotlib.colors import to_rgba
from matplotlib.patches import Patch

from ddpsim.trace import Iteration
from ddpsim.viz import palette as pal

BAND = 0.24  # the band's height, in row units, along the compute bars
BINS = 400  # slices of the iteration the band shows the busy share of


def busy_shares(it: Iteration, bins: int = BINS) -> list[float]:
    """The busy share of each of ``bins`` equal slices of ``it`` (forward start to its end)."""
    lo, hi = it.forward.start_ns, it.end_ns
    width = (hi - lo) / bins if hi > lo else 0
    shares = [0.0] * bins
    for s, e in (it.busy(lo, hi) if width else []):
        k = int((s - lo) // width)
        while k < bins and lo + k * width < e:  # each span adds its part to the slices it touches
            shares[k] += (min(e, lo + (k + 1) * width) - max(s, lo + k * width)) / width
            k += 1
    return [min(1.0, x) for x in shares]


def draw_busy(ax, rank: int, it: Iteration, y: float, ms) -> None:
    """``it``'s busy shares as one band from ``y`` (nothing without busy spans): one call, fast."""
    if it.compute_busy is None or it.end_ns <= it.forward.start_ns:
        return
    shares = busy_shares(it)
    x0, step = ms(it.forward.start_ns), (ms(it.end_ns) - ms(it.forward.start_ns)) / len(shares)
    ax.broken_barh([(x0 + k * step, step) for k in range(len(shares))], (y, BAND), zorder=4.5,
                   facecolors=[to_rgba(pal.BUSY, 0.08 + 0.92 * f) for f in shares], edgecolor="none",
                   gid=f"compute_busy:r{rank}")


def legend_handles(present: list[Iteration]) -> list:
    if not any(it.compute_busy is not None for it in present):
        return []
    return [Patch(facecolor=pal.BUSY, label="GPU busy: its compute kernels (light: idle)")]
