"""What each part's file defines, to tell a wrong file (another part's, or none of the part's names) in one line."""
from __future__ import annotations

from pathlib import Path

# part -> (the starter's file name, the names the autograder calls)
EXPECTS = {"part1": ("buckets.py", ("compute_bucket_assignment_by_size",)),
           "part2": ("bucketed_ddp.py", ("reducer_params", "BucketedDDP")),
           "part3": ("predict.py", ("predict_sweep", "choose_bucket_cap_mb", "choose_link_cap_mb", "ANSWER",
                                    "confirm"))}


def wrong_file(part: str, module, path: str | Path) -> str | None:
    """One line when the file defines none of ``part``'s names (and which part's file it looks like);
    None when it defines some: a file with a name missing is graded, that name failing its own tests."""
    if part not in EXPECTS:
        return None
    starter, names = EXPECTS[part]
    if any(hasattr(module, n) for n in names):
        return None
    other = next((f"part {p.removeprefix('part')}'s {f}" for p, (f, ns) in EXPECTS.items()
                  if p != part and all(hasattr(module, n) for n in ns)), None)
    return (f"{Path(path).name} is not a part {part.removeprefix('part')} file: it defines none of "
            f"{', '.join(names)} (the names of {starter})" + (f"; it looks like {other}" if other else ""))
