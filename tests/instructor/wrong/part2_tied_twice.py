# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong (f): counts the tied weight twice (``fc3.weight is fc2.weight``), so the layout names a
parameter DDP does not have. Check 2.1 names it; the 2-rank run still trains and is graded."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import reference  # noqa: E402


def reducer_params(module):
    return [p for _, m in module.named_modules() for _, p in m.named_parameters(recurse=False) if p.requires_grad]


reference.reducer_params = reducer_params  # the given BucketedDDP calls it by its module-level name
BucketedDDP = reference.BucketedDDP
