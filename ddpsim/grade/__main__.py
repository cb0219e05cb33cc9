"""``python -m ddpsim.grade partN STUDENT_FILE [--json results.json]``, and
``python -m ddpsim.grade release OUTDIR`` (the student copy, without solutions)."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from ddpsim.grade.core import PARTS, grade
from ddpsim.grade.results import rank_output, results_json
from ddpsim.proctree import descendants


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["release"]:
        return release_main(argv[1:])
    p = argparse.ArgumentParser(
        prog="python -m ddpsim.grade",
        description="Grade one part of the ddpsim course module (assignments/). Exit status: "
                    "0 all tests passed, 1 some failed, 2 usage error. "
                    "`python -m ddpsim.grade release OUTDIR` writes the students' copy.")
    p.add_argument("part", choices=PARTS, help="which part: " + ", ".join(PARTS))
    p.add_argument("student_file", help="the student's file (e.g. assignments/part1/buckets.py)")
    p.add_argument("--json", metavar="PATH", help="also write Gradescope-style results JSON here")
    p.add_argument("--tests", metavar="DIR", help="folder with autograder.py (default: assignments/PART)")
    p.add_argument("--rank-timeout", metavar="S", type=float, default=90.0,
                   help="stop a multi-process run (every rank) after S seconds (default 90)")
    p.add_argument("--keep", metavar="DIR", help="keep the run's trace there (part 2: DIR/run.json, your "
                                                 "recorder calls) to open in the app")
    p.add_argument("--quiet", action="store_true", help="print only the total")
    args = p.parse_args(argv)
    if "" in (args.json, args.keep):  # an empty path names no file: Path("") is the current folder
        print(f"ddpsim.grade: error: --{'json' if args.json == '' else 'keep'} wants a path, not an empty one",
              file=sys.stderr)
        return 2
    path = Path(args.student_file)
    if not path.is_file():
        print(f"ddpsim.grade: error: {path} does not exist", file=sys.stderr)
        return 2
    if args.keep and Path(args.keep).exists() and not Path(args.keep).is_dir():
        print(f"ddpsim.grade: error: --keep {args.keep} is a file, not a folder", file=sys.stderr)
        return 2
    if args.rank_timeout <= 0:
        print(f"ddpsim.grade: error: --rank-timeout must be > 0, got {args.rank_timeout:g}",
              file=sys.stderr)
        return 2
    before = set(descendants(living=True))
    try:
        result = grade(args.part, path, tests_dir=args.tests, rank_timeout=args.rank_timeout, keep=args.keep)
    finally:  # processes the graded code left running: the grader would wait for them at exit
        left = stop_new_processes(before)
    if left:
        print(f"ddpsim.grade: stopped {len(left)} process{'es' * (len(left) > 1)} the graded code left running",
              file=sys.stderr)
    if result.error:
        print(f"ddpsim.grade: error: {result.error}", file=sys.stderr)
    if args.quiet:
        print(f"{args.part}: {result.score:g}/{result.max_score:g}")
    else:
        print(result.table())
    if args.keep:
        print(f"kept {', '.join(map(str, result.kept))}: open it in the app: the sidebar's 'Or upload your own trace'" if result.kept
              else f"no trace to keep in {args.keep}: " + ("part 1 runs no processes" if args.part == "part1"
                                                           else "the run did not get that far"))
    if result.logs:  # what the ranks printed on stderr (gloo's abort): after the report, whole (watch.py)
        sys.stdout.flush()
        print(rank_output(result.logs, limit=sys.maxsize).lstrip("\n"), file=sys.stderr)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results_json(result), indent=2))
    return 0 if result.passed else 1


def release_main(argv: list[str]) -> int:
    from ddpsim.grade.release import ReleaseError, release

    p = argparse.ArgumentParser(
        prog="python -m ddpsim.grade release",
        description="Write the students' copy of this repository into OUTDIR: every tracked file "
                    "except the instructor-only ones (reference and wrong solutions, the tests "
                    "that grade them), each marked on its first line.")
    p.add_argument("outdir", help="a new or empty folder outside this repository")
    args = p.parse_args(argv)
    try:
        r = release(args.outdir)
    except ReleaseError as e:
        print(f"ddpsim.grade release: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {len(r.copied)} files to {r.outdir}; left out {len(r.left_out)} "
          f"instructor-only files:")
    for rel in r.left_out:
        print(f"  {rel}")
    return 0


# -- processes a graded file started and left running ------------------------------------------
# A student's code may start processes (multiprocessing, subprocess) and not end them. Left alone, a
# non-daemon multiprocessing child makes the grader wait for it at exit, after it printed its results
# (forever, for a child that never ends), and any other child outlives the grader. main() notes the
# processes below it before grading and kills the new ones after (the part 2 ranks are already
# stopped by ddpsim.ranks). Linux only (/proc); elsewhere nothing is found and nothing is killed.
def _multiprocessing_helpers() -> set[int]:
    """multiprocessing's own helpers (resource tracker, fork server): they end with this process."""
    pids = set()
    try:
        from multiprocessing import forkserver, resource_tracker

        pids.add(getattr(resource_tracker._resource_tracker, "_pid", None))
        pids.add(getattr(forkserver._forkserver, "_forkserver_pid", None))
    except (ImportError, AttributeError):
        pass
    return {p for p in pids if isinstance(p, int)}


def stop_new_processes(before: set[int]) -> list[int]:
    """Kill the processes below this one that were not there ``before``; returns their ids."""
    left = sorted(set(descendants(living=True)) - before - _multiprocessing_helpers())
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:  # it ended meanwhile
            pass
    return left


if __name__ == "__main__":
    from ddpsim.__main__ import end_process  # Note [A command exits without finalizing]

    end_process(main())
