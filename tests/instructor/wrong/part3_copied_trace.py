# ddpsim: instructor only (left out of the student release, see assignments/INSTRUCTORS.md)
"""Wrong: does not measure. confirm copies the given baseline recording (a real run of the
transformer on 2 ranks, made earlier at the default cap) and relabels its cap."""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _reference3 import reference  # noqa: E402

ANSWER, predict_sweep = reference.ANSWER, reference.predict_sweep
choose_bucket_cap_mb, choose_link_cap_mb = reference.choose_bucket_cap_mb, reference.choose_link_cap_mb


def confirm(out_path):
    data, cap = json.loads(Path(reference.BASELINE).read_text()), float(choose_bucket_cap_mb())
    data["meta"]["config"]["bucket_cap_mb"] = cap
    for rank in data["ranks"]:
        for layout in rank.get("layouts", []):
            for b in layout["buckets"]:
                b["cap_bytes"] = int(cap * 1024 * 1024)
    Path(out_path).write_text(json.dumps(data))
