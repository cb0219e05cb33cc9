# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong (a): no overlap. The hook only fills the buckets; every allreduce starts in
finalize, after backward is over."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import reference  # noqa: E402

reducer_params = reference.reducer_params


class BucketedDDP(reference.BucketedDDP):
    def mark_bucket_ready(self, bucket_index):
        pass  # launches nothing from the hook

    def finalize(self):
        for bucket in self.buckets:  # every bucket, in order, after backward
            self.launch(bucket)
        self.next_bucket = len(self.buckets)
        super().finalize()
