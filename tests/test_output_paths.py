"""Output paths are checked before any work, in one line. One that is the command's input is refused and
the input left as it was: ``simulate --trace run.json --out run.json`` replaced a recording by its simulation
(which then could not be taken to another world size), ``sweep --out`` a recording by a table, ``import
--out`` a torch profile by its import, and ``merge --out`` a shard by the merged trace. One that cannot be
written is refused before the measurement or the table (``calibrate --save /proc/x`` measured for 5 s, then
failed; ``gpucheck`` and ``published`` printed their results, then failed); validate's: test_validate_flags."""
import shutil

import pytest
from test_merge_roundtrip import PARAMS, _write

from ddpsim.cli import main as cli
from ddpsim.samples import BUNDLED_DIR, sample_path

STEP = [1000] * (6 + PARAMS)  # ns between a shard's instants, as tests/test_merge_one_run.py writes them


def _refused(capsys, argv, out, given) -> None:
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"error: --out {out} is the input {given}: writing it would replace what this command "
                        "reads; give another file\n") and err.count("\n") == 1, err


@pytest.mark.parametrize("command", [["simulate"], ["sweep", "--bucket-cap-mb", "1,5"]])
def test_a_simulation_refuses_to_write_over_its_trace(command, tmp_path, capsys, monkeypatch):
    run = tmp_path / "run.json"
    shutil.copy(sample_path("01_mlp_torch_default"), run)
    before = run.read_bytes()
    monkeypatch.chdir(tmp_path)
    _refused(capsys, [*command, "--trace", "run.json", "--out", "./run.json"], "./run.json", "run.json")  # respelt
    assert run.read_bytes() == before
    cal = tmp_path / "cal.json"
    cal.write_text("{}")  # refused before it is read
    _refused(capsys, [*command, "--trace", "run.json", "--calibration", "cal.json", "--out", "cal.json"],
             "cal.json", "cal.json")
    assert run.read_bytes() == before and cal.read_text() == "{}"


def test_an_import_refuses_to_write_over_a_profile(tmp_path, capsys):
    profiles = [tmp_path / f"resnet18_gloo_ws2_rank{r}.kineto.json.gz" for r in (0, 1)]
    for p in profiles:
        shutil.copy(BUNDLED_DIR / "h100" / p.name, p)
    before = profiles[0].read_bytes()
    _refused(capsys, ["import", *map(str, profiles), "--out", str(profiles[0])], profiles[0], profiles[0])
    assert profiles[0].read_bytes() == before


def test_a_merge_refuses_to_write_over_a_shard(tmp_path, capsys):
    shards = [tmp_path / f"run.json.rank{r}.jsonl" for r in (0, 1)]
    for r, path in enumerate(shards):
        _write(path, r, 2, (0, 10**9 + 3000 * r, [STEP, STEP], 64))
    before = shards[0].read_bytes()
    _refused(capsys, ["merge", *map(str, shards), "--out", str(shards[0])], shards[0], shards[0])
    assert shards[0].read_bytes() == before
    assert cli(["merge", *map(str, shards), "--out", str(tmp_path / "run.json")]) == 0  # another file: merged


@pytest.mark.parametrize("argv, flag", [
    (["calibrate", "--save", "/proc/x", "--reps", "2"], "--save"),
    (["calibrate", "--trace", str(sample_path("01_mlp_torch_default")), "--out", "/proc/x"], "--out"),
    (["gpucheck", "--json", "/proc/x"], "--json"),
    (["published", "--only", "ddp", "--json", "/proc/x"], "--json"),
    (["record", "--iters", "2", "--out", "/proc/x"], "--out"),  # it named the run's /proc/x.logs folder
])
def test_an_output_that_cannot_be_written_is_refused_before_the_work(argv, flag, capsys):
    assert cli(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"ddpsim {argv[0]}: error: {flag} /proc/x: /proc takes no new file (")
    assert err.count("\n") == 1, err


def test_a_folder_not_there_yet_is_made_by_every_writer(tmp_path, capsys):
    """simulate, sweep and record made a missing folder of --out; export, import and gpucheck refused it."""
    run = str(sample_path("01_mlp_torch_default"))
    assert cli(["export", "--chrome", run, str(tmp_path / "a" / "x.json")]) == 0
    assert cli(["import", str(tmp_path / "a" / "x.json"), "--out", str(tmp_path / "b" / "c" / "y.json")]) == 0
    capsys.readouterr()
    assert (tmp_path / "b" / "c" / "y.json").is_file()


def test_calibrate_refuses_a_folder_as_its_out_before_measuring(tmp_path, capsys):
    """It measured for 7 s, printed the fit, then said "cannot use adir: Is a directory"."""
    assert cli(["calibrate", "--trace", str(sample_path("01_mlp_torch_default")), "--out", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"ddpsim calibrate: error: --out {tmp_path}: {tmp_path} is a folder, not a file\n"
