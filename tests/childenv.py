"""The environment for a ``python -m ddpsim`` child of a test or benchmark (no pytest needed)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout: tests/ -> the repository


def child_env(**extra) -> dict:
    """This checkout first on PYTHONPATH, the caller's path after it: a box whose packages come from
    PYTHONPATH (the GPU box's carried wheels) lost them where tests replaced it ("No module named
    'simpy'", docs/gpu.md)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **extra}
