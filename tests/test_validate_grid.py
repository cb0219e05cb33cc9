"""``validate --grid`` mechanics on a tiny grid (accuracy is a benchmark figure, not tested here)."""
import csv
import json
import math

import pytest

from ddpsim.__main__ import main
from ddpsim.record.config import RecordConfig
from ddpsim.errors import CLIError
from ddpsim.experiments.grid import grid_configs, stats
from ddpsim.experiments.compare import bucket_start_error


@pytest.mark.slow
def test_tiny_grid_table(tmp_path, capsys):
    out = tmp_path / "table"
    rc = main(["validate", "--grid", "--models", "mlp", "--world-sizes", "2", "--caps", "default",
               "--orders", "torch,definition", "--find-unused", "off", "--record-iters", "5",
               "--iters", "4", "--workdir", str(tmp_path / "runs"), "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    summary = json.loads(text.strip().splitlines()[-1])
    assert summary["stats"]["rows"] == 2, text
    assert summary["stats"]["predicted"] == 2, text  # a row whose recording failed names its error
    assert "median |error|" in text
    rows = list(csv.DictReader(open(out.with_suffix(".csv"))))
    assert [(r["model"], r["world_size"], r["order"], r["impl"]) for r in rows] == [
        ("mlp", "2", "torch", "torch"), ("mlp", "2", "definition", "minddp")]
    for r in rows:
        assert not r["error"]
        for k in ("predicted_ms", "measured_ms", "error_pct", "bucket_start_error_pct"):
            assert math.isfinite(float(r[k])), (k, r)
    data = json.loads(out.with_suffix(".json").read_text())
    assert len(data["rows"]) == 2 and len(data["calibrations"]) == 1
    assert data["calibrations"][0]["link"]["shared_core"] is True
    # the calibration run and the two grid runs were kept in --workdir
    assert len(list((tmp_path / "runs").glob("*.json"))) == 3
    # Note [Calibrate in the recording's ranks]: the line was fitted from the calibration
    # run's own probe, every size of it, and stored with the trace
    from ddpsim.experiments.grid import CAL_SIZES
    from ddpsim.trace import load_trace

    (cal_path,) = (tmp_path / "runs").glob("*calibration*.json")
    meta = load_trace(cal_path).meta
    assert [n for n, _, _ in meta["allreduce_probe"]] == CAL_SIZES
    assert meta["calibration"]["points"] == [[n, t] for n, t, _ in meta["allreduce_probe"]]


def test_grid_configs_and_stats():
    cfgs = grid_configs([None, 0.25], ["torch", "definition"], [False, True])
    assert len(cfgs) == 8 and cfgs[0] == {"bucket_cap_mb": None, "order": "torch", "find_unused": False}
    s = stats([{"error_pct": -4.0, "bucket_start_error_pct": 1.0}, {"error_pct": 10.0,
               "bucket_start_error_pct": 3.0}, {"error_pct": math.nan, "bucket_start_error_pct": math.nan}])
    assert s["median_abs_error_pct"] == 7.0 and s["max_abs_error_pct"] == 10.0
    assert s["max_bucket_start_error_pct"] == 3.0 and s["predicted"] == 2


def test_bucket_start_error_is_relative_to_iteration_time():
    from ddpsim.sim import Link, ParamSpec, SimConfig, Workload, simulate

    w = Workload("t", [ParamSpec(i, f"p{i}", 1024 * 1024) for i in range(4)], [3, 2, 1, 0], [1.0] * 4,
                 Link(alpha_s=0.0, bandwidth_Bps=1e6), forward_s=1.0)
    a, sa = simulate(w, SimConfig(world_size=2, bucket_cap_mb=2, iters=3))
    assert bucket_start_error(a, a, sa["iteration_time_s"]) == 0.0
    w.forward_s = 1.5  # every launch 0.5 s later
    b, _ = simulate(w, SimConfig(world_size=2, bucket_cap_mb=2, iters=3))
    assert bucket_start_error(b, a, 10.0) == pytest.approx(0.05)


def test_order_needs_minddp():
    with pytest.raises(CLIError, match="--impl minddp"):
        RecordConfig(order="definition").validate()
    with pytest.raises(CLIError, match="--order must be one of"):
        RecordConfig(impl="minddp", order="sideways").validate()
    RecordConfig(impl="minddp", order="definition").validate()


def test_grid_bad_arguments_are_one_line(capsys):
    assert main(["validate", "--grid", "--orders", "sideways"]) == 2
    assert "--orders" in capsys.readouterr().err
    assert main(["validate"]) == 2


def test_calibration_cap_must_not_be_on_the_grid(capsys):
    assert main(["validate", "--grid", "--caps", "0.25,4", "--calibration-cap", "4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--calibration-cap 4 is one of --caps" in err[0]
    assert main(["validate", "--grid", "--caps", "default", "--calibration-cap", "25"]) == 2


def test_jitter_is_measured_unless_given():
    from ddpsim.sim import Link, ParamSpec, Workload
    from ddpsim.learn.jitter import pick_jitter

    w = Workload("t", [ParamSpec(0, "p0", 4)], [0], [1.0], Link(), meta={"jitter_estimated": 0.12})
    assert pick_jitter(None, w, None, 10) == 0.12  # Note [Measured, not fitted, noise]
    assert pick_jitter(0.3, w, None, 10) == 0.3


def test_table_keeps_a_dotted_name(tmp_path):
    from ddpsim.experiments.table import write_table

    rows = [{"model": "mlp", "world_size": 2, "bucket_cap_mb": 0.25, "order": "torch", "find_unused": False,
             "impl": "torch", "predicted_ms": 10.0, "measured_ms": 11.0, "error_pct": -9.1,
             "bucket_start_error_pct": 1.0, "n_buckets": "2/2"}]
    paths = write_table({"rows": rows}, str(tmp_path / "run.v2"))
    assert [p.name for p in paths] == ["run.v2.csv", "run.v2.json"]
    assert all(p.exists() for p in paths)
    assert [p.name for p in write_table({"rows": rows}, str(tmp_path / "t.csv"))] == ["t.csv", "t.json"]


@pytest.mark.parametrize("argv, message", [
    (["--grid", "--iters", "0"], "--iters must be at least 1, not 0"),
    (["--extrapolate", "--iters", "0"], "--iters must be at least 1, not 0"),
    (["--grid", "--record-iters", "0"], "--record-iters must be at least 1, not 0"),
    (["--grid", "--iters", "2000000"], "--iters must be at most 1,000,000 synced steps, not 2000000"),
    (["--trace", "ddpsim/samples/01_mlp_torch_default.json", "--iters", "0"], "--iters must be at least 1"),
    (["--grid", "--world-sizes", ""], "--grid needs at least one world size"),
    (["--extrapolate", "--world-sizes", ""], "--world-sizes needs world sizes >= 2"),
])
def test_a_given_value_is_checked_not_replaced_by_the_default(capsys, argv, message):
    """`--iters 0` once ran 40 (or 20) iterations: a value the user gave is never swapped for a default."""
    assert main(["validate", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
