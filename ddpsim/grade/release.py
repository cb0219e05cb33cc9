"""The student copy of the course: this repository's tracked files minus the instructor-only ones.

    python -m ddpsim.grade release OUTDIR

Note [Course release]: the repository holds the reference solutions and the known-wrong
solutions the autograder is tested with (``tests/instructor/``), so it is the *instructors'*
repository; anything in it is reachable by whoever clones it. Students get the release instead:
every file ``git ls-files`` lists, as in the working tree, except the files whose first line
starts with ``INSTRUCTOR_ONLY`` (each solution, each wrong solution and the tests that grade
them carry that line). Marking files, not listing folders, keeps a solution copied elsewhere
by mistake out of the release too. Git history is not copied (``assignments/solutions/`` was
in it until the solutions moved): publish the release as a fresh repository.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

INSTRUCTOR_ONLY = "# ddpsim: instructor only"  # the first line of every file left out


class ReleaseError(ValueError):
    """A release that cannot be made; the message is one line."""


@dataclass
class Release:
    outdir: Path
    copied: list[str]  # repository-relative paths written to outdir
    left_out: list[str]  # instructor-only paths


def repo_root() -> Path:
    """The repository holding this ``ddpsim`` package."""
    return Path(__file__).resolve().parents[2]


def is_instructor_only(path: Path) -> bool:
    """Its first line starts with ``INSTRUCTOR_ONLY``, or holds it in a Markdown comment (``<!-- # ...``),
    hidden where the file is rendered."""
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
        return first.removeprefix("<!-- ").startswith(INSTRUCTOR_ONLY)
    except (UnicodeDecodeError, OSError):
        return False  # binary files are never marked


def tracked_files(root: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise ReleaseError(f"{root} is not a git checkout (git ls-files failed: "
                           f"{getattr(e, 'stderr', '') or e})".strip()) from None
    return [p for p in out.split("\0") if p and (root / p).is_file()]


def release(outdir: str | Path, root: Path | None = None) -> Release:
    """Write the student copy of ``root`` (default: this repository) into ``outdir``."""
    root = (root or repo_root()).resolve()
    out = Path(outdir).resolve()
    if out == root or root in out.parents:
        raise ReleaseError(f"{outdir} is inside the repository; choose a folder outside {root}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ReleaseError(f"{outdir} exists and is not an empty folder")
    copied, left_out = [], []
    for rel in tracked_files(root):
        src = root / rel
        if is_instructor_only(src):
            left_out.append(rel)
            continue
        dst = out / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        copied.append(rel)
    if not left_out:
        raise ReleaseError(f"no file in {root} is marked instructor-only: is this already a release?")
    return Release(out, copied, left_out)
