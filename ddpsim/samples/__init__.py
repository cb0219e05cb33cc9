"""Bundled sample traces: real recordings shipped with ddpsim, so the app opens on one.

The traces are ``ddpsim/samples/*.json``, recorded by ``ddpsim/samples/regenerate.py``.
``list_samples()`` gives their names (file stems) in sorted order; the first is
the app's default, so name files to sort in the order a learner should meet them.

``H100_DIR`` (``ddpsim/samples/h100/``) holds the real H100 runs the GPU check reads:
PyTorch-profiler traces with CUDA-event truth (its README.md says how they were made).

Set the environment variable ``DDPSIM_SAMPLES_DIR`` to use another folder of
traces instead (the tests point it at ``tests/fixtures`` to be deterministic).
"""
from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "DDPSIM_SAMPLES_DIR"
BUNDLED_DIR = Path(__file__).resolve().parent
H100_DIR = BUNDLED_DIR / "h100"  # real H100 profiles and their CUDA-event truth (h100/README.md)


def samples_dir() -> Path:
    """The folder samples are read from: ``$DDPSIM_SAMPLES_DIR`` if set, else the bundled one."""
    override = os.environ.get(ENV_VAR)
    return Path(override) if override else BUNDLED_DIR


def list_samples() -> list[str]:
    """Names of the sample traces (file stems), sorted; [] if there are none."""
    folder = samples_dir()
    if not folder.is_dir():
        return []
    return sorted(p.stem for p in folder.glob("*.json") if p.is_file())


def sample_path(name: str) -> Path:
    """The path of sample ``name`` (a name from list_samples(), with or without .json)."""
    stem = name[:-5] if name.endswith(".json") else name
    path = samples_dir() / f"{stem}.json"
    if Path(stem).name != stem or not path.is_file():
        known = ", ".join(list_samples()) or "none"
        raise ValueError(f"no sample trace named {name!r} in {samples_dir()} (samples: {known})")
    return path
