"""Ranks' profiles put on one clock from the ends of the allreduces they ran together.

Note [A collective ends at once on every rank]: an allreduce completes on a rank only after every
rank has contributed its data, and its last exchange finishes on all ranks within one message's
latency, so on one clock the k-th bucket allreduce of a synchronised step ends at nearly the same
instant on every rank, whatever the ranks' speeds: a straggler moves every rank's end, not its own,
while the starts differ by how long each rank waited for the others. The end on rank r minus the end
on a reference rank, over the allreduces both ran (matched by step, order and size), is then rank
r's clock minus the reference's plus a scatter of about one message's latency. Its median is the
offset; the range of the middle half of the differences (max - min once the lowest and highest
quarters are left out) says how well the ends pin it. The reference is the rank whose allreduces the
most other ranks ran (the lowest of those tied: rank 0 when every rank profiled the same steps), so
a rank whose window is short, or that failed early, costs only its own offset its precision, not
every other rank's; a rank that shares no allreduce with the reference is measured against the ends
of the ranks measured before it, on the reference's clock (Note [Ranks join a clock through the
allreduces they share] in ``ddpsim/trace/clock_groups.py``, which also groups ranks that share
allreduces only among themselves). With the bundled profiles copied into four ranks on four clocks,
the lowest rank's window cut to two steps and rank 3's to the last two (or the last one), rank 3
lands on its copy (rank 1) to the nanosecond (``tests/test_clock_align_ranks.py``). A rank's first
forward does not pin a clock: aligning the ranks there erases how long one rank waited for another,
so only a rank (or group) that shares no allreduce with the largest group is placed by its steps,
with a caution (Note [A rank no allreduce ties is placed by its steps] in
``ddpsim/trace/clock_place.py``). On the bundled H100 gloo profiles (two ranks on one host, one
clock) the 9 ends differ by a median of +60 us with a middle half 119 us wide: gloo's ring over TCP
ends its last step on the two ranks up to a chunk's transfer apart. Ends scattered by milliseconds
meet on no one clock: the profiles may come from two runs, or a busy host delayed its collectives,
and the import says so (``scatter``). Used by ``ddpsim.trace.clock_groups.estimate`` and
``ddpsim.trace.profile_meta.align`` (``ddpsim import``).

Each bucket's end is that of the event the import reads as its allreduce: the NCCL kernel on the
GPU clock, gloo's ``gloo:all_reduce`` run on the CPU (the device copies that follow it on a GPU
queue behind other work), else the ``c10d::allreduce_`` op. Kineto puts CPU and GPU events on the
host's one timeline, so an offset found from either moves both.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

END = "sync_end_ns"  # a bucket's collective end on its rank's clock: set by the import, popped here
# Offsets this small are kept as the shared clock whatever their spread: Kineto writes whole
# microseconds, NCCL's last ring step reaches the ranks one message's latency apart (a few us over
# NVLink, ~10-20 us over InfiniBand), so two ranks' ends differ by tens of us on one clock.
FLOOR_NS = 20_000
# Ends scattered wider than this (ns; the middle half's range) are not one job's: its allreduces end
# within about a message's latency (tens to a few hundred us here), two runs' drift apart by whole ms.
SCATTER_NS = 1_000_000
LISTED = 8  # ranks named in the note; the others are summarised by their range
CLOCK = "clock: "  # the note of ranks moved onto one clock, which ``ddpsim import`` prints


@dataclass(frozen=True)
class Offset:
    """A rank's clock minus the reference rank's (``ref``; ns), the middle half's range of the
    differences it is the median of (ns), and how many allreduces gave it."""

    rank: int
    ns: int
    spread_ns: int
    n: int
    ref: int


def collective_ends(rank_dicts: list[dict]) -> list[dict]:
    """Each rank's allreduce ends, {(step, k, bytes): end_ns}, with ``END`` popped from every bucket."""
    out = []
    for r in rank_dicts:
        mine = {}
        for it in r["iterations"]:
            for k, b in enumerate(it["buckets"]):
                end = b.pop(END, None)
                if end is not None and it.get("sync", True):
                    mine[(it["iteration"], k, b["bytes"])] = end
        out.append(mine)
    return out


def offset_from(rank: int, mine: dict, common: dict, ref: int) -> Offset | None:
    """A rank's offset from the ends in ``common``: the median difference over the allreduces it
    shares with them, the middle half's range beside it; None when it shares none."""
    diffs = sorted(end - common[key] for key, end in mine.items() if key in common)
    if not diffs:
        return None
    quarter = len(diffs) // 4
    return Offset(rank, int(round(statistics.median(diffs))), diffs[-1 - quarter] - diffs[quarter], len(diffs), ref)


def shared(offsets: list[Offset]) -> bool:
    """Whether the profiles keep the clock they share: every offset within its own spread (the
    ends cannot tell it from zero) or within ``FLOOR_NS``."""
    return all(abs(o.ns) <= max(FLOOR_NS, o.spread_ns) for o in offsets)


def clock_meta(offsets: list[Offset]) -> dict:
    """``meta.clock`` of ranks moved by their offsets: the method, the widest spread, the offsets
    and the rank whose clock they are moved onto."""
    return {"method": "collective-ends", "skew_ns": max(o.spread_ns for o in offsets),
            "offsets_ns": {str(o.rank): o.ns for o in offsets}, "reference": offsets[0].ref}


def note(offsets: list[Offset]) -> str:
    """One line: the offsets removed and how many allreduces gave them."""
    ref = offsets[0].ref
    rest = [o for o in offsets if o.rank != ref]
    listed = ", ".join(f"rank {o.rank} {time_text(o.ns)} (middle half {o.spread_ns / 1e6:.3f} ms wide)"
                       for o in rest[:LISTED])
    if len(rest) > LISTED:
        ns = [o.ns for o in rest[LISTED:]]
        listed += f" and {len(ns)} more ({time_text(min(ns))} to {time_text(max(ns))})"
    counts = sorted({o.n for o in rest})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    which = "" if len(offsets) < 3 else (" (the rank whose allreduces the most others ran; a rank that shares none "
                                         "with it, against the ranks measured before it)")
    return (f"{CLOCK}the profiles' clocks differ; each rank was moved onto rank {ref}'s by the median "
            f"difference of the ends of the {n} allreduces it shares with rank {ref}{which} (Note [A collective "
            f"ends at once on every rank] in ddpsim/trace/clock_align.py): {listed}")


def scatter(offsets: list[Offset]) -> str | None:
    """Where the ends scatter wider than ``SCATTER_NS`` on any one clock, why the profiles may not be one
    job's (Note [A collective ends at once on every rank]); else None."""
    wide = max(o.spread_ns for o in offsets)
    return None if wide <= SCATTER_NS else (
        f"the allreduces' ends scatter over {wide / 1e6:.1f} ms between ranks, where one job's ends fall within "
        "about a message's latency: the profiles may come from different runs, or a busy host delayed its collectives")


def time_text(ns: int) -> str:
    """An offset in ms to the microsecond, or in s from a second on."""
    return f"{ns / 1e6:+.3f} ms" if abs(ns) < 1e9 else f"{ns / 1e9:+.6f} s"
