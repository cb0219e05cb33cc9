"""``python -m ddpsim import``: PyTorch-profiler (Kineto) traces, one per rank, into a ddpsim trace."""
from __future__ import annotations

from ddpsim.trace import save_trace
from ddpsim.trace.profile_import import import_profiles

HELP = "import PyTorch-profiler (Kineto) traces, one per rank, into a ddpsim trace"


def add_arguments(p) -> None:
    p.add_argument("profiles", nargs="+",
                   help="Kineto traces (.json or .json.gz), one per rank, or a folder of them")
    p.add_argument("--out", required=True, help="ddpsim trace to write (JSON)")


def main(args) -> int:
    trace = import_profiles(args.profiles)
    save_trace(trace, args.out)
    its = sum(len(r.iterations) for r in trace.ranks)
    print(f"wrote {args.out}: {len(trace.ranks)} rank(s), {its} iterations, {len(trace.params)} parameters, "
          f"times on the {trace.meta['timebase']['grad_ready']} clock; "
          f"{len(trace.meta['import_notes'])} notes in meta.import_notes")
    return 0
