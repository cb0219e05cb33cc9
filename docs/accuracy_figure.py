"""Draw docs/accuracy.png (predicted against measured, every validation run) from the results
kept in docs/data/, and print the accuracy table of README.md and docs/accuracy.md.

    .venv/bin/python docs/accuracy_figure.py

Each file in docs/data/ is what one check wrote; to refresh or add a check, run its command
(RESULTS below, from the repository root; the CPU checks on a quiet machine), then this script,
and copy the printed rows into the tables. A check without its file is left out of the figure.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout, installed or not

from ddpsim.viz.accuracy import accuracy_points, error_summary, plot_accuracy  # noqa: E402
from ddpsim.viz.figio import figure_bytes  # noqa: E402

# (the check as the tables name it, its result file in docs/data/ [and section], the command that writes it)
PUBLISHED = "ddpsim published --json docs/data/published.json"
USER_PATH = "python benchmarks/user_path.py --out docs/data"
RESULTS = [
    ("2-core CPU, a fresh 2-rank run replayed (`validate --trace RUN`)", "replay.json", USER_PATH),
    ("2-core CPU, a 2-rank run asked for 4 (`simulate --trace RUN --world-size 4`)", "worldsize.json", USER_PATH),
    ("2-core CPU, same world size (2 and 4 ranks)", "grid.json",
     "ddpsim validate --grid --out docs/data/grid"),
    ("2-core CPU, learnt at 2 ranks, predicted at 4", "extrapolate.json",
     "ddpsim validate --extrapolate --out docs/data/extrapolate"),
    ("real H100 runs, backward (1 and 2 ranks)", "gpucheck.json",
     "ddpsim gpucheck --json docs/data/gpucheck.json"),
    ("published DDP on 1-2 nodes (V100, A100)", "published.json#ddp", PUBLISHED),
    ("published multi-node DDP scaling, throughput", "published.json#scaling", PUBLISHED),
    ("published nccl-tests allreduce bus bandwidth", "published.json#nccl", PUBLISHED),
]


def _file(name: str) -> tuple[str, str | None]:
    """(file name, section or None) of a RESULTS entry."""
    file, _, section = name.partition("#")
    return file, section or None


def _shown(command: str, name: str) -> str:
    """The command as the table shows it (no output flag; a published section by --only)."""
    shown = command.split(" --out")[0].split(" --json")[0]
    section = _file(name)[1]
    return f"{shown} --only {section}" if section else shown


def load_checks(folder: Path = HERE / "data") -> list[tuple[str, list[tuple[float, float]], str]]:
    """(label, points, command) for every check in RESULTS whose result file is in ``folder``."""
    out = []
    for label, name, command in RESULTS:
        file, section = _file(name)
        path = folder / file
        if path.is_file():
            out.append((label, accuracy_points(json.loads(path.read_text()), section), _shown(command, name)))
    return out


def missing(folder: Path = HERE / "data") -> list[str]:
    """The commands whose result files are not in ``folder`` (their checks are not drawn)."""
    return list(dict.fromkeys(command for _, name, command in RESULTS if not (folder / _file(name)[0]).is_file()))


def table_rows(checks) -> list[str]:
    """The accuracy table's rows: check, command, runs, median and max |error|."""
    rows = []
    for label, points, command in checks:
        med, worst = error_summary(points)
        rows.append(f"| {label} | `{command}` | {len(points)} | {med:.1f}% | {worst:.1f}% |")
    return rows


def model_rows(result: dict) -> list[str]:
    """docs/accuracy.md's rows by model and world size of a validate result: runs, mean error
    (the sign says fast or slow), max |error|."""
    groups: dict[tuple, list[float]] = {}
    for r in result["rows"]:
        if not r.get("error"):
            groups.setdefault((r["model"], r["world_size"]), []).append(r["error_pct"])
    return [f"| {model} | {ws} | {len(errs)} | {sum(errs) / len(errs):+.1f}% | {max(map(abs, errs)):.1f}% |"
            for (model, ws), errs in sorted(groups.items())]


def main(out: Path = HERE / "accuracy.png") -> int:
    checks = load_checks()
    fig = plot_accuracy([(label, points) for label, points, _ in checks])
    out.write_bytes(figure_bytes(fig, "png", dpi=110))
    print("\n".join(table_rows(checks)))
    for label, name, _ in RESULTS[2:4]:  # the validate checks, by model
        if (HERE / "data" / name).is_file():
            print(f"\n{label}, by model and world size:")
            print("\n".join(model_rows(json.loads((HERE / "data" / name).read_text()))))
    for command in missing():
        print(f"not drawn (no result file): run `{command}` on a quiet machine to add it")
    print(f"wrote {out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
