"""``validate --grid`` / ``--extrapolate`` check every flag before the first recording, and an
interrupted grid keeps the folder its message names.

Each bad-flag case runs the real command in a child with a deadline: one that regresses records
for minutes, and is stopped (its whole process group) and failed at the deadline instead.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT, child_env
from faultinject import iterations_written

# the smallest grid: a regression records one group of two runs, not the default grid
ONE_RUN = ["--models", "mlp", "--caps", "default", "--orders", "torch", "--find-unused", "off"]
SMALL = [*ONE_RUN, "--record-iters", "4", "--iters", "2"]
GRID = ["--grid", "--world-sizes", "2", *SMALL]
EXTRAPOLATE = ["--extrapolate", "--world-sizes", "4", "--launches", "1", *SMALL]  # learnt at 2 ranks
DEADLINE_S = 60


def refused(argv, tmp_path) -> str:
    """The one stderr line of ``python -m ddpsim validate ARGV``, which must exit 2 within DEADLINE_S."""
    proc = subprocess.Popen([sys.executable, "-m", "ddpsim", "validate", *argv], cwd=tmp_path,
                            env=child_env(TMPDIR=str(tmp_path)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    t0 = time.monotonic()
    try:
        out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"validate {' '.join(argv)} still running after {DEADLINE_S} s: it started recording")
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, lines, out)
    assert "recording" not in out and time.monotonic() - t0 < DEADLINE_S
    assert not list(tmp_path.glob("ddpsim-validate-*")), "no work folder made, none left"
    return lines[0]


@pytest.mark.parametrize("argv, says", [
    ([*GRID, "--out", "/proc/x"], "--out /proc/x: /proc takes no new file"),
    ([*EXTRAPOLATE, "--out", "/proc/x"], "--out /proc/x: /proc takes no new file"),
    ([*GRID, "--calibration", "nope.json"], "--grid and --calibration conflict"),
    ([*GRID, "--trace", "run.json"], "--grid and --trace conflict"),
    ([*GRID, "--against", "run.json"], "--grid and --against conflict"),
    ([*GRID, "--no-calibrate"], "--grid and --no-calibrate conflict"),
    ([*EXTRAPOLATE, "--no-calibrate"], "--extrapolate and --no-calibrate conflict"),
])
def test_a_bad_flag_is_one_line_before_any_recording(tmp_path, argv, says):
    """`--out /proc/x`, `--calibration nope.json` and `--trace run.json --grid` recorded the grid
    (minutes) before failing on the table, or ignored the flag."""
    assert says in refused(argv, tmp_path)


def test_an_out_inside_a_file_is_one_line_before_any_recording(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert f"{tmp_path / 'afile'} is not a folder" in refused([*GRID, "--out", "afile/table"], tmp_path)


def test_reuse_of_an_empty_workdir_is_refused(tmp_path):
    """`--grid --reuse --workdir adir` with an empty adir recorded the whole grid."""
    adir = tmp_path / "adir"
    adir.mkdir()
    err = refused([*GRID, "--reuse", "--workdir", "adir"], tmp_path)
    assert "--reuse: adir holds none of the recordings to reuse (expected mlp_ws2_calibration_cap4.json" in err
    assert list(adir.iterdir()) == []


def test_reuse_of_a_missing_workdir_is_refused_and_not_made(tmp_path):
    err = refused([*GRID, "--reuse", "--workdir", "typo"], tmp_path)
    assert "--reuse: --workdir typo is not a folder" in err
    assert not (tmp_path / "typo").exists()


@pytest.mark.slow
def test_an_interrupted_grid_keeps_the_traces_it_names(tmp_path):
    """SIGTERM said "partial trace kept in /tmp/ddpsim-validate-XXXX/..." and then removed that folder."""
    cmd = [sys.executable, "-m", "ddpsim", "validate", "--grid", "--world-sizes", "2", *ONE_RUN,
           "--record-iters", "100000"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=child_env(TMPDIR=str(tmp_path)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not any(  # the calibration run's shards: RUN.json.rankR.jsonl
                iterations_written(s.with_name(s.name.removesuffix(".rank0.jsonl")), 2) >= 4
                for s in tmp_path.glob("ddpsim-validate-*/*calibration*.json.rank0.jsonl")):
            time.sleep(0.05)
        assert time.monotonic() < deadline, "no iteration recorded in 45 s"
        proc.send_signal(signal.SIGTERM)  # the launcher alone, as `kill PID` or `timeout` does
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    kept = re.search(r"partial trace kept in (.+?) \(", err)
    assert kept, err
    paths = [Path(p) for p in kept.group(1).split(", ")]
    assert paths and all(p.parent.name.startswith("ddpsim-validate-") for p in paths), paths
    assert all(p.is_file() for p in paths), f"the message names files that are gone: {err}"
    assert f"kept the recordings so far in {paths[0].parent}" in err


def test_grid_reuse_records_only_the_groups_missing_from_the_workdir(tmp_path):
    """--grid --reuse resumes a grid (the groups whose traces are all there are loaded, the others
    recorded, each named); with none there it refuses, before recording anything."""
    from ddpsim.experiments.grid import CALIBRATION_CAP_MB, grid_configs
    from ddpsim.experiments.recorder import Recorder

    said = []
    rec = Recorder(str(tmp_path), grid_configs([None], ["torch"], [False]), 4, True, CALIBRATION_CAP_MB, said.append)
    groups = [("mlp", 2, 1), ("transformer", 2, 1)]
    with pytest.raises(ValueError, match="holds none of the recordings to reuse"):
        rec.check_reuse(groups, every=False)
    for p in rec.paths("mlp", 2):
        p.write_text("{}")  # only whether it is there is checked before the first recording
    rec.check_reuse(groups, every=False)
    assert len(said) == 1 and "no recording of transformer at world size 2" in said[0], said
    with pytest.raises(ValueError, match="no recording of transformer at world size 2"):
        rec.check_reuse(groups)  # --extrapolate: every one
    rec.close()
    assert tmp_path.is_dir(), "a --workdir is the user's: never removed"
