"""The memory and time of ``ddpsim export --chrome`` on a long recording: it should grow with one iteration's
events, not with the run's (building every event, then one string of them, took 1.1 GB for 6,400 iterations).

A bundled CPU recording's last iteration repeated to N iterations (``bench_long_trace.repeated``), exported by
``python -m ddpsim export --chrome`` in a fresh process: one file, and ``--per-rank``. For each, the peak
resident memory of that process (``os.wait4``'s ``ru_maxrss``), its wall and CPU seconds, the median of
``--repeat`` runs with their range; ``load only`` is a process that only loads the trace (the reader keeps it
whole): what the export adds is the difference. ``--root A,B`` runs the export of each checkout in turn
(another commit's, e.g. ``git worktree add /tmp/old HEAD``), interleaved, each output compared with the
first's. Prints a markdown table.

    python benchmarks/bench_export_memory.py [--iterations 1600,6400] [--repeat 3] [--root /tmp/old,.]
"""
from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_long_trace import repeated  # noqa: E402

LOAD_ONLY = "import sys; from ddpsim.trace.export import load_trace; load_trace(sys.argv[1])"  # its imports too


def measured(cmd: list[str], cwd: Path) -> tuple[float, float, float]:
    """(peak RSS in MiB, wall seconds, CPU seconds) of ``cmd``, a process of its own (the CPU seconds are steadier
    than the wall's on a busy machine)."""
    t = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{' '.join(cmd)} (in {cwd}) failed: {p.stderr.read().decode()}")
    p.stderr.close()
    return usage.ru_maxrss / 1024, seconds, usage.ru_utime + usage.ru_stime  # Linux: kilobytes


def same_output(a: Path, b: Path) -> bool:
    if a.is_dir():
        return sorted(p.name for p in a.iterdir()) == sorted(p.name for p in b.iterdir()) and all(
            filecmp.cmp(p, b / p.name, shallow=False) for p in a.iterdir())
    return filecmp.cmp(a, b, shallow=False)


def spread(values: list[float], fmt: str) -> str:
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}-{max(values):{fmt}})"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", default="6400", help="trace lengths, comma-separated")
    p.add_argument("--repeat", type=int, default=3, help="runs of each export (interleaved across --root)")
    p.add_argument("--root", default=str(HERE.parent), help="checkouts to run, comma-separated (default: this one)")
    args = p.parse_args()
    roots = [Path(r).resolve() for r in args.root.split(",")]
    print("| iterations | mode | code | peak RSS MiB, median (range) | wall s | CPU s | same output |\n"
          "|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.iterations.split(",")):
            trace = Path(tmp) / f"t{n}.json"
            trace.write_text(json.dumps(repeated(n)))
            rows = {("load only", roots[0]): [measured([sys.executable, "-c", LOAD_ONLY, str(trace)], roots[0])
                                              for _ in range(args.repeat)]}
            for mode, extra in (("one file", []), ("--per-rank", ["--per-rank"])):
                for _ in range(args.repeat):
                    for k, root in enumerate(roots):
                        out = Path(tmp) / f"{k}{'' if extra else '.json'}"
                        cmd = [sys.executable, "-m", "ddpsim", "export", "--chrome", str(trace), str(out), *extra]
                        rows.setdefault((mode, root), []).append(measured(cmd, root))
                for k, root in enumerate(roots):
                    out = Path(tmp) / f"{k}{'' if extra else '.json'}"
                    rows[(mode, root)].append(same_output(out, Path(tmp) / f"0{'' if extra else '.json'}"))
            for (mode, root), runs in rows.items():
                same = "" if mode == "load only" else "yes" if runs.pop() else "NO"
                print(f"| {n} | {mode} | {root} | {spread([r[0] for r in runs], '.0f')} | "
                      f"{spread([r[1] for r in runs], '.2f')} | {spread([r[2] for r in runs], '.2f')} | {same} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
