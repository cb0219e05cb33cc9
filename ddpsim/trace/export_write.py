"""Writing an export's files (``ddpsim.trace.export``, which knows their Kineto shape; this, only JSON and files):
JSON written as it is made, the text ``json.dumps`` gives in pieces, each file whole or not at all.

An export of a long recording holds a million events: building them all, then one string of them, then its
bytes, took a gigabyte. Here an ``Array`` stands for a JSON array whose items come in batches from a generator;
``chunks`` gives the text of an object holding such arrays piece by piece, each batch encoded as it comes and
dropped (the same text, byte for byte, that ``json.dumps`` gives for the object with its arrays made whole:
``", "`` and ``": "`` separators, ASCII); ``writer.write_chunks`` writes the pieces to a file whole.
``carried`` is a trace's ``to_dict()`` with each rank's iterations such an array; ``write_rank_files`` writes
the per-rank form's folder.
"""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ddpsim.trace.types import RankTrace, Trace
from ddpsim.trace.writer import write_chunks


class Array:
    """A JSON array whose items come from ``batches``, an iterable of lists of JSON-able items (none an
    ``Array``), read once; ``count`` says how many items were written (read it after the text is made)."""

    def __init__(self, batches: Iterable[list]):
        self.batches, self.count = batches, 0


def chunks(obj: Any) -> Iterator[str]:
    """``json.dumps(obj)`` in pieces, each ``Array`` in ``obj`` written batch by batch."""
    if isinstance(obj, Array):
        opening = "["
        for batch in obj.batches:
            if batch:  # json.dumps of a list is "[" + ", ".join(items) + "]": its items' text is [1:-1]
                yield opening + json.dumps(batch)[1:-1]
                opening, obj.count = ", ", obj.count + len(batch)
        yield "[]" if opening == "[" else "]"
    elif isinstance(obj, dict) and _lazy(obj):
        sep = "{"
        for key, value in obj.items():
            yield sep + json.dumps({key: 0})[1:-4] + ": "  # the key as json.dumps writes it ('{"k": 0}')
            yield from chunks(value)
            sep = ", "
        yield "}"
    elif isinstance(obj, (list, tuple)) and _lazy(obj):
        sep = "["
        for value in obj:
            yield sep
            yield from chunks(value)
            sep = ", "
        yield "]"
    else:
        yield json.dumps(obj)


def whole(obj: Any) -> Any:
    """``obj`` with each ``Array`` made a list of its items."""
    if isinstance(obj, Array):
        return [item for batch in obj.batches for item in batch]
    if isinstance(obj, dict) and _lazy(obj):
        return {key: whole(value) for key, value in obj.items()}
    return [whole(value) for value in obj] if isinstance(obj, (list, tuple)) and _lazy(obj) else obj


def _lazy(obj: Any) -> bool:
    """Whether an ``Array`` lies somewhere in ``obj``."""
    if isinstance(obj, Array):
        return True
    if isinstance(obj, dict):
        return any(_lazy(v) for v in obj.values())
    return isinstance(obj, (list, tuple)) and any(_lazy(v) for v in obj)


def carried(trace: Trace) -> dict:
    """``trace.to_dict()``, each rank's ``iterations`` an ``Array`` that makes one iteration's dict at a time
    (``to_dict`` of a trace holding that iteration alone: its rules, not a copy of them)."""
    bare = replace(trace, ranks=[replace(r, iterations=[]) for r in trace.ranks]).to_dict()
    for rank, raw in zip(trace.ranks, bare["ranks"]):
        raw["iterations"] = Array(_iteration_dicts(trace, rank))
    return bare


def _iteration_dicts(trace: Trace, rank: RankTrace) -> Iterator[list]:
    for it in rank.iterations:
        yield replace(trace, meta={}, params=[], ranks=[RankTrace(rank.rank, iterations=[it])]).to_dict()[
            "ranks"][0]["iterations"]


def write_rank_files(out_dir: str | Path, ranks: list[int], text: Callable[[int], Iterable[str]]) -> list[Path]:
    """``OUT_DIR/rank<R>.json`` for each rank R of ``ranks``, the text ``text(R)`` makes, each written whole
    (``write_chunks``); an OSError names the file that failed and says which of these files were written before it."""
    if str(out_dir) == "":  # Path("") is the current folder
        raise ValueError("no folder to export into: the path is empty")
    out_dir = Path(out_dir)
    _refuse_other_ranks(out_dir, set(ranks))
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for r in ranks:
        path = out_dir / f"rank{r}.json"
        try:
            write_chunks(text(r), path)
        except OSError as e:
            done = (f"{', '.join(p.name for p in paths)} written whole before it" if paths
                    else "no rank's file written")
            raise OSError(e.errno, f"{e.strerror} ({done}; {len(ranks) - len(paths)} of "
                                   f"{len(ranks)} not written)", e.filename) from None
        paths.append(path)
    return paths


def _refuse_other_ranks(out_dir: Path, ranks: set[int]) -> None:
    """Refuse, before writing, a folder holding ``rank<R>.json`` for a rank this trace lacks (an earlier export of
    a larger run): HTA would read it as part of this run, and removing the user's files is not ours to do."""
    found = (re.fullmatch(r"rank(\d+)\.json", p.name) for p in (out_dir.iterdir() if out_dir.is_dir() else ()))
    if others := sorted(int(m.group(1)) for m in found if m and int(m.group(1)) not in ranks):
        names = ", ".join(f"rank{r}.json" for r in others[:3]) + (f" and {len(others) - 3} more" if others[3:] else "")
        raise ValueError(f"{out_dir} already holds {names}, which this {len(ranks)}-rank trace would not overwrite "
                         "(HTA would read them as ranks of this run): export into an empty folder or remove them")
