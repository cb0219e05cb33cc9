# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong (b): launches each bucket from the hook, in order, but waits on its allreduce at once,
so backward stands still while the bucket is on the wire."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference import reference  # noqa: E402

reducer_params = reference.reducer_params


class BucketedDDP(reference.BucketedDDP):
    def launch(self, bucket):
        super().launch(bucket)
        bucket.future.wait()  # blocks the hook until the allreduce is done
