"""``python -m ddpsim.grade partN STUDENT_FILE [--json results.json]``."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ddpsim.grade.core import PARTS, grade, results_json


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m ddpsim.grade",
        description="Grade one part of the ddpsim course module (assignments/). Exit status: "
                    "0 all tests passed, 1 some failed, 2 usage error.")
    p.add_argument("part", choices=PARTS, help="which part: " + ", ".join(PARTS))
    p.add_argument("student_file", help="the student's file (e.g. assignments/part1/buckets.py)")
    p.add_argument("--json", metavar="PATH", help="also write Gradescope-style results JSON here")
    p.add_argument("--tests", metavar="DIR", help="folder with autograder.py (default: assignments/PART)")
    p.add_argument("--quiet", action="store_true", help="print only the total")
    args = p.parse_args(argv)
    path = Path(args.student_file)
    if not path.is_file():
        print(f"ddpsim.grade: error: {path} does not exist", file=sys.stderr)
        return 2
    result = grade(args.part, path, tests_dir=args.tests)
    if args.quiet:
        print(f"{args.part}: {result.score:g}/{result.max_score:g}")
    else:
        print(result.table())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results_json(result), indent=2))
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
