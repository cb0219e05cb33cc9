# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong: does not run the simulator. Returns rows with made-up times that point at 25 MiB."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference3 import reference  # noqa: E402

ANSWER, confirm, choose_link_cap_mb = reference.ANSWER, reference.confirm, reference.choose_link_cap_mb


def predict_sweep():
    return [{"bucket_cap_mb": c, "iteration_time_s": 0.1 / c ** 0.1}
            for c in reference.CANDIDATES_MB]


def choose_bucket_cap_mb():
    return min(predict_sweep(), key=lambda r: r["iteration_time_s"])["bucket_cap_mb"]


reference.choose_bucket_cap_mb = choose_bucket_cap_mb  # confirm records at this cap
