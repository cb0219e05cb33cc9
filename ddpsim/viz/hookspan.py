"""A comm hook inside its bucket's span, for the Timeline and the Compare figure.

With a comm hook (``record --comm-hook`` or ``simulate --comm-hook``), DDP's ``Reducer`` hands
each bucket to the hook and the bucket is done when the hook's future is, so a bucket's bar runs
from the hook's call to that future's completion (``BucketEvent.launch_ns`` to ``complete_ns``).
Inside the bar, from the trace's ``collectives``, ``compress_ns`` and ``decompress_ns``:

  compress     the hook's compute before its first collective (the fp16 cast, PowerSGD's
               P = M Q): the bucket's colour, lighter, hatched ``////``
  decompress   its compute after the last one (the cast back, PowerSGD's M = P Q^T): hatched ``\\\\``
  collectives  a thinner bar per collective the hook issued, labelled with what it sent
               (``fp16 2.0 MB``); collectives in flight together (a hook's own, or on
               round-robin's process groups) are stacked in sub-lanes, and a group other than
               the default one (``"0"``) is named (``g1 fp32 8.2 MB``)

The lighter gaps between collectives are the hook's compute between them (PowerSGD's
orthogonalisation of P). A bucket without a hook keeps the plain bar of ``timeline.py``.
"""
from __future__ import annotations

from matplotlib.patches import Patch, Rectangle

from ddpsim.trace import BucketEvent, HookCollective, Iteration
from ddpsim.viz import palette as pal

SHORT = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "float64": "fp64"}
INNER = 0.56  # a collective's bar height, as a fraction of its bucket's bar
FONT = 7.5  # the collectives' labels (pt)


def assign_lanes(spans: list[tuple[int, int]]) -> list[int]:
    """Greedy interval colouring: the lane of each (start, end) so that lanes never overlap.
    (The Timeline's allreduce lanes, and the sub-lanes of a hook's collectives.)"""
    lane_end: list[int] = []
    lanes = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: spans[i]):
        start, end = spans[i]
        for k, last in enumerate(lane_end):
            if last <= start:
                lanes[i], lane_end[k] = k, end
                break
        else:
            lanes[i] = len(lane_end)
            lane_end.append(end)
    return lanes


def lighter(hex_color: str, amount: float = 0.55) -> str:
    """``hex_color`` mixed with ``amount`` of white: the same hue, paler."""
    h = hex_color.lstrip("#")
    rgb = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return "#" + "".join(f"{round(c + (255 - c) * amount):02X}" for c in rgb)


def size_text(nbytes: int) -> str:
    """Bytes in decimal units, as a label: ``512 B``, ``12 KB``, ``2.0 MB``, ``1.3 GB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes / 1e3:.0f} KB" if nbytes >= 1e3 else f"{nbytes} B"


def collective_label(c: HookCollective) -> str:
    """What a hook's collective sent: ``fp16 2.0 MB``; its op when not an allreduce, its process
    group when not the default one."""
    group = "" if c.group == "0" else f"g{c.group} "
    op = "" if c.op == "all_reduce" else f"{c.op} "
    return f"{group}{op}{SHORT.get(c.dtype, c.dtype)} {size_text(c.bytes)}"


def draw_hooked_bucket(ax, rank: int, b: BucketEvent, y: float, height: float, ms, minlabel: float) -> None:
    """Bucket ``b``'s hook span in the bar from ``y`` to ``y + height``: the span (gid
    ``allreduce:r{rank}:b{bucket}``, as a plain bucket's bar), its compress and decompress
    segments (``hook:r{rank}:b{bucket}:compress`` / ``:decompress``) and each collective
    (``hook:r{rank}:b{bucket}:c{k}``, k in launch order). ``ms``: ns -> the axis' ms."""
    color, tag = pal.bucket_color(b.bucket), f"r{rank}:b{b.bucket}"
    x0, x1 = ms(b.launch_ns), ms(b.complete_ns)
    ax.add_patch(Rectangle((x0, y), max(x1 - x0, 0), height, facecolor=lighter(color, 0.7), edgecolor=pal.TEXT,
                           lw=0.6, zorder=3, gid=f"allreduce:{tag}"))
    for name, start, end, hatch in (("compress", b.launch_ns, b.launch_ns + (b.compress_ns or 0), "////"),
                                    ("decompress", b.complete_ns - (b.decompress_ns or 0), b.complete_ns, "\\\\\\\\")):
        if end > start:
            ax.add_patch(Rectangle((ms(start), y), ms(end) - ms(start), height, facecolor=lighter(color, 0.35),
                                   edgecolor=color, hatch=hatch, lw=0, zorder=3.5, gid=f"hook:{tag}:{name}"))
    cols = b.collectives or []
    sub = assign_lanes([(c.launch_ns, c.complete_ns) for c in cols])
    n_sub = max(sub, default=0) + 1
    h = height * INNER / n_sub
    y_top = y + height * (1 - INNER) / 2
    for k, (c, lane) in enumerate(zip(cols, sub)):
        start, width = ms(c.launch_ns), max(ms(c.complete_ns) - ms(c.launch_ns), 0)
        ax.add_patch(Rectangle((start, y_top + lane * h), width, h, facecolor=color, edgecolor=pal.TEXT, lw=0.5,
                               zorder=4, gid=f"hook:{tag}:c{k}"))
        texts = [f"b{b.bucket} {collective_label(c)}", collective_label(c)] if k == 0 else [collective_label(c)]
        _label(ax, start, width, y_top + (lane + 0.5) * h, texts, color, minlabel * FONT / 9)
    if not cols:
        _label(ax, x0, x1 - x0, y + height / 2, [f"b{b.bucket} (nothing sent)", f"b{b.bucket}"],
               lighter(color, 0.7), minlabel)


def _label(ax, start: float, width: float, y: float, texts: list[str], color: str, char: float) -> None:
    """The first of ``texts`` that fits in ``width`` (``char``: one character's width), if any."""
    text = next((t for t in texts if width >= char * (len(t) + 1.5)), None)
    if text is not None:
        ax.text(start + width / 2, y, text, ha="center", va="center", fontsize=FONT,
                color=pal.text_color_on(color), zorder=6, clip_on=True)


def legend_handles(present: list[Iteration]) -> list:
    """Legend entries for the hook's pieces, where any bucket drawn has a hook."""
    if not any(b.collectives is not None for it in present for b in it.buckets):
        return []
    return [Patch(facecolor=pal.TEXT, edgecolor=pal.TEXT, label="hook's collective"),
            Patch(facecolor="white", edgecolor=pal.TEXT, hatch="////", label="hook compute, before"),
            Patch(facecolor="white", edgecolor=pal.TEXT, hatch="\\\\\\\\", label="hook compute, after")]
