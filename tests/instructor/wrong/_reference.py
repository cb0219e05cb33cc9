# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""The part 2 reference solution, imported by the wrong solutions next to this file: each one
changes a single method, so each is a known mistake and nothing else."""
import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "solutions" / "part2_bucketed_ddp.py"
_spec = importlib.util.spec_from_file_location("ddpsim_part2_reference", _path)
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)
