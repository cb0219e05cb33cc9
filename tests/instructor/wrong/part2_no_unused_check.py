# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong (g): finalize skips the check for a parameter that got no gradient. It waits for the
buckets that launched and copies them back; a bucket that never launched (a parameter not used in
the forward) is passed over in silence, its parameters keeping whatever .grad they had."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import reference  # noqa: E402

reducer_params = reference.reducer_params


class BucketedDDP(reference.BucketedDDP):
    def finalize(self):
        for bucket in self.buckets[:self.next_bucket]:  # no error for the buckets that never launched
            bucket.future.wait()
            for i, view in zip(bucket.param_indices, bucket.views):
                self.params[i].grad.copy_(view)
        self.finalize_queued = False
