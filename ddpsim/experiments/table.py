"""The validation table of ``validate --grid`` / ``--extrapolate``: one row per predicted run,
the median and max |error|, to stdout and OUT.csv / OUT.json; and what the recorded-vs-predicted
experiments share (``error_summary``, ``recordings_folder``, ``add_run_arguments``, ``finish``)."""
from __future__ import annotations

import contextlib
import csv
import json
import math
import statistics
import tempfile
from pathlib import Path

COLUMNS = ("model", "world_size", "bucket_cap_mb", "order", "find_unused", "impl", "predicted_ms",
           "measured_ms", "error_pct", "bucket_start_error_pct", "n_buckets", "error")


def stats(rows) -> dict:
    errs = [abs(r["error_pct"]) for r in rows if math.isfinite(r.get("error_pct", math.nan))]
    starts = [r["bucket_start_error_pct"] for r in rows if math.isfinite(r.get("bucket_start_error_pct", math.nan))]
    return {"rows": len(rows), "predicted": len(errs),
            "median_abs_error_pct": statistics.median(errs) if errs else math.nan,
            "max_abs_error_pct": max(errs) if errs else math.nan,
            "median_bucket_start_error_pct": statistics.median(starts) if starts else math.nan,
            "max_bucket_start_error_pct": max(starts) if starts else math.nan}


def format_row(r: dict) -> str:
    return (f"{r['model']:12} ws{r['world_size']:<2} cap {str(r['bucket_cap_mb']):>7} {r['order']:10} "
            f"fu {'on ' if r['find_unused'] else 'off'}  predicted {r['predicted_ms']:8.1f} ms  "
            f"measured {r['measured_ms']:8.1f} ms  error {r['error_pct']:+6.1f}%  "
            f"bucket start {r['bucket_start_error_pct']:5.1f}%" + (f"  ({r['error']})" if r.get("error") else ""))


def table_paths(out: str) -> tuple[Path, Path]:
    """(OUT.csv, OUT.json) of ``--out OUT``: OUT without a .csv or .json it ends in, "run.v2" kept whole."""
    base = Path(out)
    if base.suffix in (".csv", ".json"):
        base = base.with_suffix("")
    return base.with_name(base.name + ".csv"), base.with_name(base.name + ".json")


def write_table(result: dict, out: str) -> list[Path]:
    csv_path, json_path = table_paths(out)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(COLUMNS) + ["exposed_comm_pred_ms", "exposed_comm_meas_ms"],
                           extrasaction="ignore")
        wr.writeheader()
        for r in result["rows"]:
            wr.writerow(r)
    clean = json.loads(json.dumps(result, default=str).replace("NaN", "null"))
    json_path.write_text(json.dumps(clean, indent=1))
    return [csv_path, json_path]


def report(res: dict, out: str | None) -> None:
    """Print the table and its summary; write OUT.csv / OUT.json if ``out``."""
    print(f"{'model':12} {'ws':4} {'cap':>11} {'order':10} {'fu':3}  {'predicted':>19}  {'measured':>17}  "
          f"{'error':>13}  bucket start")
    for r in res["rows"]:
        print(format_row(r))
    s = res["stats"]
    print(f"iteration time: median |error| {s['median_abs_error_pct']:.1f}%, max {s['max_abs_error_pct']:.1f}% "
          f"over {s['predicted']} rows; bucket start error: median {s['median_bucket_start_error_pct']:.1f}%, "
          f"max {s['max_bucket_start_error_pct']:.1f}% of the iteration time; load average "
          f"{res['load']['min']:.2f}-{res['load']['max']:.2f} (median {res['load']['median']:.2f})")
    one = res.get("single_launch_stats")
    if one:  # Note [Pool launches] in extrapolate.py: the rows above are means over the launches
        print(f"pooled over {res['launches']} launches; the launches alone: median |error| "
              f"{one['median_abs_error_pct']:.1f}%, max {one['max_abs_error_pct']:.1f}% over {one['predicted']} runs")
    if out:
        paths = write_table(res, out)
        print("wrote " + ", ".join(map(str, paths)))
    print(json.dumps({"stats": s, "load": res["load"]}, separators=(",", ":")).replace("NaN", "null"))


def error_summary(errors: list[float]) -> str:
    """``median |error| X%, max Y% over N predictions`` of relative errors (0.05: 5%)."""
    pct = [abs(e) * 100 for e in errors]
    return f"median |error| {statistics.median(pct):.1f}%, max {max(pct):.1f}% over {len(pct)} predictions"


def add_run_arguments(p) -> None:
    """``--workdir`` and ``--out``, as every recorded-vs-predicted experiment takes them."""
    p.add_argument("--workdir", default=None, help="keep the recordings here (default: a temporary folder)")
    p.add_argument("--out", default=None, help="also write OUT.json")


@contextlib.contextmanager
def recordings_folder(workdir: str | None, prefix: str):
    """``workdir`` (made if missing), else a temporary folder removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        folder = Path(workdir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        yield folder


def finish(text: str, rows: list[dict], out: str | None) -> int:
    """Print an experiment's table; write its rows to OUT.json when asked."""
    print(text)
    if out:
        Path(f"{out}.json").write_text(json.dumps(rows, indent=1))
    return 0
