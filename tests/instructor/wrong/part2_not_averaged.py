# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong (e): numerically wrong. Forgets to divide by the world size, so every rank applies
the sum of the gradients, not their mean."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import reference  # noqa: E402

reducer_params = reference.reducer_params


class BucketedDDP(reference.BucketedDDP):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.world_size = 1  # the hook copies grad / 1 into the bucket: a sum after allreduce
