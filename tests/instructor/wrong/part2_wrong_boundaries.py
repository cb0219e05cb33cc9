# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong (d): its own bucket assignment closes a bucket *before* adding the parameter that
would reach the cap (DDP closes it after), so the buckets hold other parameters."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import reference  # noqa: E402

reducer_params = reference.reducer_params


def close_before_cap(tensors, limits, *unused):
    buckets, current, size = [], [], 0
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if current and size + nbytes >= limits[0]:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
    return buckets + [current], [limits[0]] * (len(buckets) + 1)


reference.compute_bucket_assignment_by_size = close_before_cap  # what the constructor calls


class BucketedDDP(reference.BucketedDDP):
    pass
