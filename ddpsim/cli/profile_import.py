"""``python -m ddpsim import``: PyTorch-profiler (Kineto) traces, one per rank, into a ddpsim trace."""
from __future__ import annotations

from ddpsim.cli.headline import headline_lines
from ddpsim.trace import save_trace
from ddpsim.trace.writer import refuse_empty, refuse_input
from ddpsim.trace.profile_import import import_or_carried
from ddpsim.trace.clock_align import CLOCK
from ddpsim.trace.profile_meta import CAUTION
from ddpsim.trace.profile_sizes import unknown_sizes

HELP = "import PyTorch-profiler (Kineto) traces, one per rank, into a ddpsim trace"


def add_arguments(p) -> None:
    p.add_argument("profiles", nargs="+",
                   help="Kineto traces (.json or .json.gz), one per rank, or a folder of them")
    p.add_argument("--out", required=True, help="ddpsim trace to write (JSON)")
    p.add_argument("--model", metavar="SPEC",
                   help="the model the profile ran (path.py:factory, package.module:factory or a zoo name, as "
                        "record takes it), built on the meta device: parameter names and sizes for a "
                        "profile taken without record_shapes, checked against the shapes of one taken with")
    p.add_argument("--note", action="append", default=[], metavar="TEXT",
                   help="what the profiles cannot say about the run (e.g. that its ranks shared one GPU), kept in "
                        "meta.import_notes and shown on the Timeline (repeatable)")


def main(args) -> int:
    refuse_empty(args.out, "--out")
    refuse_input(args.out, args.profiles)  # a profile replaced by its import
    model = None
    if args.model:
        from ddpsim.models.shapes import model_params

        model = model_params(args.model)
    trace, carried = import_or_carried(args.profiles, model=model, notes=args.note)
    save_trace(trace, args.out)
    counts = sorted({len(r.iterations) for r in trace.ranks})
    its = f"{counts[0]} iterations per rank" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} iterations per rank"
    if carried:  # a ddpsim export: the trace it carries, whole
        print("\n".join(headline_lines(trace, f"wrote {args.out}: the trace the ddpsim export carries ("
                                              f"{len(trace.ranks)} rank(s), {its}), unchanged"
                                              + ("; --model is not needed for it" if model else "")
                                              + ("; --note is not added to it" if args.note else ""))))
        return 0
    print("\n".join(headline_lines(trace, f"wrote {args.out}: {len(trace.ranks)} rank(s), {its}, "
                                          f"{len(trace.params)} parameters, times on the "
                                          f"{trace.meta['timebase']['grad_ready']} clock; "
                                          f"{len(trace.meta['import_notes'])} notes in meta.import_notes")))
    sizes = trace.meta["sizes"]
    print(f"sizes: parameters from {sizes['params']}, allreduces from {sizes['buckets']}")
    if (why := unknown_sizes(trace)) is not None:
        print(f"note: {why}")
    for note in trace.meta["import_notes"]:
        if str(note).startswith((CAUTION, CLOCK)):  # the clock note: what was moved, and by how much
            print(note)
    return 0
