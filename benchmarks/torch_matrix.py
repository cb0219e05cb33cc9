"""The test suite on every torch ddpsim claims: one side venv per version, one table.

    python benchmarks/torch_matrix.py --torch 2.4.1,2.6.0,2.8.0,2.10.0,2.11.0,2.13.0,2.14.1

For each version it makes (once; kept under ``--cache``) a venv with that torch (the standard
wheel from the package index: a CUDA build, which runs on a CPU-only machine) and the project's
other pins from ``pyproject.toml``, installs this checkout into it without dependencies, runs
the suite there (slow tests included; the notebooks only with ``--notebooks``) and writes one
markdown table: version, passed, failed, skipped, seconds, the failures' first lines. Not part
of CI: each venv is several GB. Its last table is committed as ``docs/torch-matrix.md``.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = Path.home() / ".cache" / "ddpsim-torch-matrix"
TITLE = ("# The torch matrix: the whole test suite on each torch ddpsim supports\n\n"
         "Written by `benchmarks/torch_matrix.py` (one side venv per torch: the standard wheel from the "
         "package index, a CUDA build run on the CPU, with the project's other pins). The README's "
         "supported range and `ddpsim.torchcompat.TESTED` are the versions with 0 failures here.\n\n")
HEAD = ("| torch | commit | passed | failed | skipped | minutes | first lines of the failures |\n"
        "|---|---|---|---|---|---|---|")


def other_pins() -> list[str]:
    """The project's pins (dependencies and the test extra) without torch."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = project["dependencies"] + project["optional-dependencies"]["test"]
    return [p for p in pins if not p.replace(" ", "").startswith("torch==")]


def venv_for(version: str, cache: Path) -> Path:
    """The cached venv of ``version`` (made and filled on first use)."""
    venv = cache / f"torch-{version}"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pins = other_pins()
    if subprocess.run(pip + [f"torch=={version}", *pins]).returncode != 0:  # a no-op once they are there
        # torch 2.11 requires setuptools<82, the test extra pins 84.2.1 (for the wheel test): the newest
        # setuptools torch allows (81.0.0 for 2.11; a venv's own 65.5 cannot build this pyproject)
        print(f"torch {version}: the project's pins conflict with torch's; the newest setuptools torch allows",
              file=sys.stderr)
        rest = [p for p in pins if not p.startswith("setuptools")]
        subprocess.run(pip + ["--upgrade", f"torch=={version}", *rest, "setuptools"], check=True)
    subprocess.run(pip + ["--no-deps", "-e", str(ROOT)], check=True)  # this checkout, as it is now
    return python


def run_suite(python: Path, junit: Path, notebooks: bool, extra: list[str]) -> float:
    args = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *extra]
    if not notebooks:
        args.append("--deselect=tests/test_notebooks.py")
    t0 = time.monotonic()
    subprocess.run(args, cwd=ROOT)
    return time.monotonic() - t0


def counts(junit: Path) -> dict:
    """passed, failed (failures and errors), skipped, and each failure's test and first line."""
    root = ET.parse(junit).getroot()
    out = {"passed": 0, "failed": 0, "skipped": 0, "failures": []}
    for case in root.iter("testcase"):
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        if bad is not None:
            out["failed"] += 1
            first = (bad.get("message") or bad.text or "").strip().splitlines()[:1]
            out["failures"].append(f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}: "
                                   f"{first[0][:160] if first else ''}")
        elif case.find("skipped") is not None:
            out["skipped"] += 1
        else:
            out["passed"] += 1
    return out


def row(version: str, c: dict, seconds: float) -> str:
    fails = "<br>".join(c["failures"]).replace("|", "\\|") or ""
    commit = subprocess.run(["git", "describe", "--always", "--dirty", "--exclude", "*"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    return (f"| {version} | {commit} | {c['passed']} | {c['failed']} | {c['skipped']} | {seconds / 60:.1f} "
            f"| {fails} |")


def kept_rows(out: Path) -> dict[str, str]:
    """The rows of an earlier table, by version: a run of some versions keeps the others'."""
    if not out.exists():
        return {}
    return {line.split("|")[1].strip(): line for line in out.read_text().splitlines()
            if line.startswith("| ") and line.split("|")[1].strip()[:1].isdigit()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--torch", required=True, help="comma-separated versions, e.g. 2.4.1,2.14.1")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"the venvs (default {DEFAULT_CACHE})")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "torch-matrix.md", help="the table (markdown)")
    p.add_argument("--notebooks", action="store_true", help="also execute the notebooks")
    p.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --), e.g. -- -m 'not slow'")
    args = p.parse_args(argv)
    versions = [v.strip() for v in args.torch.split(",") if v.strip()]
    if not versions:
        p.error("--torch names no version")
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = kept_rows(args.out)
    for v in versions:  # the table is written after each version: a stopped run keeps what it had
        print(f"== torch {v}", flush=True)
        python = venv_for(v, args.cache)
        junit = args.cache / f"torch-{v}.junit.xml"
        seconds = run_suite(python, junit, args.notebooks, args.pytest_args)
        rows[v] = row(v, counts(junit), seconds)
        write_table(args, rows)
    print(args.out.read_text())
    return 0


def write_table(args, rows: dict[str, str]) -> None:
    pytest_args = " ".join(args.pytest_args) or "the whole suite"
    key = lambda v: tuple(int(x) if x.isdigit() else 0 for x in v.split("+")[0].split("."))  # noqa: E731
    ordered = [rows[v] for v in sorted(rows, key=key)]
    args.out.write_text(f"{TITLE}{HEAD}\n" + "\n".join(ordered) + f"\n\n(`python benchmarks/torch_matrix.py "
                        f"--torch VERSIONS`{' --notebooks' if args.notebooks else ''}, rows from one or more runs; "
                        f"pytest: {pytest_args}; Python {sys.version.split()[0]}, CPU only.)\n")


if __name__ == "__main__":
    raise SystemExit(main())
