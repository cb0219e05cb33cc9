"""``calibrate --world-sizes`` and ``validate --extrapolate`` (accuracy is a benchmark figure, docs/accuracy.md)."""
import csv
import json
import math
import statistics

import pytest

from ddpsim.__main__ import main
from ddpsim.experiments.extrapolate import pool_launches


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize("argv, says", [
    (["--from-world-size", "1"], "--from-world-size must be >= 2"),
    (["--world-sizes", "2,4"], "includes --from-world-size 2"),
    (["--world-sizes", "1"], "--world-sizes needs world sizes >= 2"),
    (["--world-sizes", "four"], "--world-sizes must be integers"),
    (["--grid"], "drop --grid"),
    (["--orders", "random"], "--orders"),
    (["--find-unused", "maybe"], "--find-unused values are on/off"),
    (["--reuse"], "--reuse needs --workdir"),
    (["--launches", "0"], "--launches must be >= 1, not 0"),
])
def test_extrapolate_bad_flags(capsys, argv, says):
    assert says in _error(capsys, ["validate", "--extrapolate", *argv])


@pytest.mark.parametrize("argv, says", [  # before any rank starts (1,000 ranks were started; nan: no timeout)
    (["calibrate", "--world-sizes", "2,1000"], "--world-sizes 1000 is more ranks than one machine runs here"),
    (["calibrate", "--timeout", "nan"], "--timeout must be more than 0 and at most 86400 seconds, not nan"),
    (["calibrate", "--timeout", "0"], "--timeout must be more than 0"),
    (["calibrate", "--save", "."], "--save . is a folder: name a file"),
    (["validate", "--grid", "--wait-load", "nan"], "--wait-load wants a finite load average > 0"),  # waited 20 min
    (["validate", "--grid", "--wait-load", "-1"], "not -1 and 1200"),
])
def test_launch_bounds_are_one_line_before_any_rank(capsys, argv, says):
    assert says in _error(capsys, argv)


def test_extrapolate_reuse_of_a_workdir_without_traces(capsys, tmp_path):
    err = _error(capsys, ["validate", "--extrapolate", "--models", "mlp", "--workdir", str(tmp_path),
                          "--reuse", "--caps", "default", "--orders", "torch", "--find-unused", "off"])
    assert "has no recording of mlp at world size 2" in err


def test_bad_calibration_file(capsys, tmp_path):
    bad = tmp_path / "cal.json"
    bad.write_text(json.dumps({"hello": 1}))
    assert "holds no calibration" in _error(capsys, ["validate", "--extrapolate", "--calibration", str(bad)])
    assert "cannot read it as JSON" in _error(
        capsys, ["validate", "--extrapolate", "--calibration", str(tmp_path / "missing.json")])


def test_calibrate_measures_each_world_size(capsys, tmp_path):
    """Real gloo ranks at 2 and 3 (3 ranks share this machine's cores when it has 2)."""
    out = tmp_path / "net.json"
    assert main(["calibrate", "--world-sizes", "3,2", "--sizes-kb", "4,256", "--reps", "2", "--rounds", "3",
                 "--save", str(out)]) == 0
    cal = json.loads(out.read_text())
    assert sorted(cal["world_sizes"]) == ["2", "3"] and cal["world_size"] == 2
    for k, e in cal["world_sizes"].items():
        assert e["world_size"] == int(k) and [n for n, _ in e["points"]] == [4096, 262144]
        assert all(t > 0 for _, t in e["points"]) and all(c > 0 for _, c in e["cpu_points"])
        # Note [Calibrate world sizes in turns]: each size's time is the median of its rounds
        assert len(e["rounds"]) == 3 and [n for n, _, _ in e["rounds"][0]] == [4096, 262144]
        assert [t for _, t in e["points"]] == [statistics.median(r[i][1] for r in e["rounds"]) for i in range(2)]
    assert cal["fit"]["wall"]["world_sizes"] == [2, 3] and cal["host_cpus"] >= 1
    assert cal["time_slice_s"] >= 0
    text = capsys.readouterr().out
    assert "world-size fit" in text and "k=3" in text
    assert json.loads(text.strip().splitlines()[-1])["world_sizes"].keys() == {"2", "3"}
    assert "--world-sizes needs world sizes >= 2" in _error(capsys, ["calibrate", "--world-sizes", "1"])
    assert "--rounds must be >= 1, not 0" in _error(capsys, ["calibrate", "--rounds", "0"])
    assert "--sizes-kb needs sizes above 0 and at most 1,048,576 KiB (1 GiB), not 1e12" in _error(
        capsys, ["calibrate", "--sizes-kb", "1e12"])  # it tried to allocate 1 PB in the ranks
    assert "--sizes-kb needs two sizes or more" in _error(capsys, ["calibrate", "--sizes-kb", "4,4"])  # no fit
    assert "--out names where the --trace calibrated is written" in _error(capsys, ["calibrate", "--out", "x.json"])


def test_a_calibration_out_of_time_is_one_line_and_leaves_no_rank(capsys):
    import multiprocessing as mp

    err = _error(capsys, ["calibrate", "--sizes-kb", "4,8", "--reps", "1000000", "--rounds", "1", "--timeout", "2"])
    assert err == "ddpsim calibrate: error: the allreduce measurement at 2 ranks did not finish in 2 s"
    assert not mp.active_children()  # the ranks were stopped and joined


def _row(pred, meas, start=5.0, error=None):
    return {"model": "mlp", "world_size": 4, "predicted_ms": pred, "measured_ms": meas,
            "error_pct": math.nan if error else (pred - meas) / meas * 100, "bucket_start_error_pct": start,
            "exposed_comm_pred_ms": 1.0, "exposed_comm_meas_ms": 2.0, **({"error": error} if error else {})}


def test_pooled_row_is_the_mean_of_its_launches():
    """Note [Pool launches]: -20% and +20% launches pool to a mean prediction against a mean measurement."""
    a, b = [_row(80.0, 100.0, 4.0)], [_row(120.0, 100.0, 8.0)]
    (row,) = pool_launches([a, b])
    assert row["predicted_ms"] == 100.0 and row["measured_ms"] == 100.0 and row["error_pct"] == 0.0
    assert row["bucket_start_error_pct"] == 6.0 and row["launch_errors_pct"] == [-20.0, 20.0]
    (row,) = pool_launches([[_row(90.0, 100.0)], [_row(90.0, 80.0)]])
    assert row["error_pct"] == pytest.approx((90 - 90) / 90 * 100) and row["launch_measured_ms"] == [100.0, 80.0]
    (row,) = pool_launches([a, [_row(0.0, 0.0, error="ValueError: no steady iteration")]])
    assert math.isnan(row["error_pct"]) and row["error"] == "ValueError: no steady iteration"
    with pytest.raises(ValueError):  # launches that recorded different runs are a bug, not a table
        pool_launches([a, a + b])


@pytest.mark.slow
def test_tiny_extrapolation_table(tmp_path, capsys):
    """mlp learnt at 2 ranks, one configuration predicted at 3, over two launches; then again from the workdir."""
    argv = ["validate", "--extrapolate", "--models", "mlp", "--world-sizes", "3", "--caps", "default",
            "--orders", "torch", "--find-unused", "off", "--record-iters", "5", "--iters", "4", "--launches", "2",
            "--workdir", str(tmp_path / "runs"), "--out", str(tmp_path / "table")]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "learnt at world size 2, predicted at 3" in text and "pooled over 2 launches" in text
    rows = list(csv.DictReader(open(tmp_path / "table.csv")))
    assert [(r["model"], r["world_size"], r["order"]) for r in rows] == [("mlp", "3", "torch")]
    assert not rows[0]["error"] and math.isfinite(float(rows[0]["error_pct"]))
    data = json.loads((tmp_path / "table.json").read_text())
    assert data["from_world_size"] == 2 and sorted(data["networks"]["mlp"]["world_sizes"]) == ["2", "3"]
    assert [(c["world_size"], c["launch"]) for c in data["calibrations"]] == [(2, 1), (2, 2)]  # learnt at 2 only
    row = data["rows"][0]
    assert len(row["launch_measured_ms"]) == 2 and row["measured_ms"] == pytest.approx(
        statistics.mean(row["launch_measured_ms"]))
    assert data["launches"] == 2 and data["single_launch_stats"]["predicted"] == 2
    # the microbenchmark and both launches of both groups were kept: --reuse predicts again without recording
    runs = tmp_path / "runs"
    assert (runs / "mlp_network_ws2-3.json").exists()
    assert len(list(runs.glob("mlp_ws3_*_l2.json"))) == 2 and not list(runs.glob("*_l3.json"))
    assert main(argv + ["--reuse"]) == 0
    again = list(csv.DictReader(open(tmp_path / "table.csv")))
    assert again[0]["measured_ms"] == rows[0]["measured_ms"]
    capsys.readouterr()
    assert "has no recording of mlp at world size 2" in _error(capsys, argv[:-4] + ["--launches", "3", "--reuse",
                                                                               "--workdir", str(runs)])
