"""Bounded simulations: every option out of range is one line (exit 2), big work is refused up front,
a running simulation stops at its limit, and the same inputs give byte-identical files."""
import pytest

from ddpsim.__main__ import main

TRACE = "ddpsim/samples/01_mlp_torch_default.json"


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


SIMULATE_ERRORS = [
    (["--latency-us", "1e300"], "--latency-us must be between 0 and 1e+06 microseconds"),
    (["--bandwidth-gbps", "1e-300"], "--bandwidth-gbps must be between 0.001 and 1e+06 Gbit/s"),
    (["--jitter", "1e6"], "--jitter must be between 0 and 10"),
    (["--no-sync-every", "1000000000"], "--no-sync-every must be between 1 and 1,000,000"),
    (["--static-graph", "--no-sync-every", "2"], "static_graph with no_sync every 2 steps: torch's DDP fails"),
    (["--iters", "1000000000"], "--iters must be between 1 and 1,000,000"),
    (["--world-size", "20000000"], "--world-size must be between 1 and 10,000,000"),
    (["--concurrency", "-1"], "--concurrency must be between 1 and 64"),
    (["--interference", "1e9"], "--interference must be between 0 and 100"),
    (["--bucket-cap-mb", "1e300"], "bucket_cap_mb must be between -8.796e+12 and 8.796e+12 MiB"),
    (["--bucket-cap-mb", "1e308"], "bucket_cap_mb must be between -8.796e+12"),  # its bytes overflow a float
    (["--bucket-cap-mb-list", "1", "1e308"], "bucket_cap_mb_list entry must be between -8.796e+12"),
    (["--first-bucket-cap-mb", "1e300"], "--first-bucket-cap-mb must be between"),
    (["--straggler", "1:1e9"], "straggler 1 factor must be at most 1000"),
    (["--straggler", "0:2", "--straggler", "0:3"], "--straggler names rank 0 twice (2 and 3): give it once"),
    (["--out", ""], "--out wants a file name, not an empty one"),
    (["--comm-hook", ""], "--comm-hook wants a value, not an empty one"),  # it ran with no hook
    (["--hardware", ""], "--hardware wants a value, not an empty one"),
    (["--calibration", ""], "--calibration wants a value, not an empty one"),
    (["--calibration", "/dev/null"], "--calibration /dev/null is empty"),  # it said "cannot read it as JSON"
    (["--order", "3,,2"], "--order: '3,,2' is neither an order name nor a list of indices"),
    (["--max-events", "0"], "--max-events must be between 1 and"),
    (["--time-limit", "inf"], "--time-limit must be between 0.001 and 86400 seconds"),
    (["--iters", "100000"], "this simulation needs about 4,000,000 events"),
]


@pytest.mark.parametrize("args, message", SIMULATE_ERRORS)
def test_simulate_option_out_of_range_is_one_line(capsys, args, message):
    rc, out, err = run_cli(capsys, "simulate", "--trace", TRACE, *args)
    assert rc == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


@pytest.mark.parametrize("args, message", [
    (["--tflops", "0"], "--tflops must be between"),
    (["--batch", "0"], "--batch must be between 1 and 1,000,000"),
    (["--concurrency", "-1"], "--concurrency must be between 1 and 64"),
])
def test_simulate_arch_options_are_checked(capsys, args, message):
    rc, out, err = run_cli(capsys, "simulate", "--arch", "resnet50", *args)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_event_budget_names_the_estimate_and_the_limit(capsys):
    rc, _, err = run_cli(capsys, "simulate", "--trace", TRACE, "--iters", "5000", "--max-events", "1000")
    assert rc == 2
    assert "needs about 200,000 events" in err and "the limit is 1,000 (--max-events)" in err


def test_time_limit_stops_a_running_simulation(capsys):
    rc, _, err = run_cli(capsys, "simulate", "--trace", TRACE, "--iters", "100000",
                         "--max-events", "100000000", "--time-limit", "0.5")
    assert rc == 2 and "the simulation stopped after 0.5 s" in err


def test_huge_world_goes_through_rank_groups(capsys):
    rc, out, err = run_cli(capsys, "simulate", "--arch", "resnet50", "--world-size", "200000", "--jitter", "0.1")
    assert rc == 0, err
    assert '"world_size":200000' in out.splitlines()[-1]


@pytest.mark.parametrize("args, message", [
    (["--world-size", "8,20000000"], "--world-size must be between 1 and 10,000,000"),
    (["--latency-us", "1,1e300"], "--latency-us must be between"),
    (["--concurrency", "1,-1"], "--concurrency must be between 1 and 64"),
    (["--iters", "1000000000"], "--iters must be between"),
    (["--bucket-cap-mb", "1,,25"], "--bucket-cap-mb has an empty value in '1,,25'"),  # read as 1,25
    (["--out", ""], "--out wants a file name, not an empty one"),
])
def test_sweep_options_are_checked(capsys, args, message):
    rc, _, err = run_cli(capsys, "sweep", "--trace", TRACE, *args)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("args, message", [
    (["--world-size", "200000"], "--world-size 200000 is more ranks than one machine runs here"),
    (["--iters", "1000000000"], "--iters must be at most 1000000"),
    (["--no-sync-every", "1000000000"], "--no-sync-every must be between 1 and 1000000"),
    (["--timeout", "inf"], "--timeout must be more than 0 and at most 86400 seconds"),
    (["--timeout", "0"], "--timeout must be more than 0"),
    (["--master-port", "99999"], "--master-port must be a TCP port, 1 to 65535"),
    (["--lr", "nan"], "--lr must be a finite number"),
    (["--out", ""], "--out wants a file name, not an empty one"),
])
def test_record_option_out_of_range_starts_nothing(capsys, tmp_path, args, message):
    rc, _, err = run_cli(capsys, "record", "--out", str(tmp_path / "run.json"), *args)
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == []


def test_same_inputs_and_seed_give_byte_identical_files(capsys, tmp_path):
    outs = []
    for k in range(2):
        (tmp_path / str(k)).mkdir()
        out = tmp_path / str(k) / "sim.json"
        rc, stdout, err = run_cli(capsys, "simulate", "--trace", TRACE, "--world-size", "8", "--jitter", "0.1",
                                  "--seed", "3", "--no-calibrate", "--out", str(out))
        assert rc == 0 and "simulated in" in err  # wall time goes to stderr
        outs.append((out.read_bytes(), stdout.replace(str(tmp_path / str(k)), "")))
    assert outs[0] == outs[1], "trace files and stdout are byte-identical"
    rc, _, _ = run_cli(capsys, "simulate", "--trace", TRACE, "--world-size", "8", "--jitter", "0.1",
                       "--seed", "4", "--no-calibrate", "--out", str(tmp_path / "other.json"))
    assert (tmp_path / "other.json").read_bytes() != outs[0][0], "another seed gives another run"


def test_whatif_page_simulations_have_a_time_limit():
    from ddpsim.app import whatif
    from ddpsim.sim.api import SimulationTooLarge, simulate

    base = whatif.Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 64})
    cfg = whatif.sim_config(base)
    assert cfg.time_limit_s == whatif.TIME_LIMIT_S
    cfg.time_limit_s, cfg.iters, cfg.max_events = 0.01, 20_000, 10**9
    with pytest.raises(SimulationTooLarge, match="stopped after 0.01 s"):
        simulate(whatif.workload(base, None), cfg)


@pytest.mark.parametrize("command, extra", [("sweep", ["--bucket-cap-mb", "1,25", "--no-calibrate"]),
                                            ("simulate", ["--no-calibrate"])])
def test_an_output_path_that_is_a_directory_is_one_line_naming_it(capsys, tmp_path, command, extra):
    rc, out, err = run_cli(capsys, command, "--trace", TRACE, *extra, "--out", str(tmp_path))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and f"cannot use {tmp_path}: Is a directory" in lines[0], err


def test_an_output_path_is_written_through_its_symlink_and_never_over_a_special_file(capsys, tmp_path):
    # the trace went to a temporary file renamed over the path: a symlink became a file, a FIFO (or, as
    # root, /dev/full) was replaced, and an unwritable folder was named by the temporary file's name
    import os

    from ddpsim.trace import load_trace
    (tmp_path / "target.json").write_text("{}")
    os.symlink("target.json", tmp_path / "link.json")
    rc, _, _ = run_cli(capsys, "simulate", "--trace", TRACE, "--iters", "3", "--out", str(tmp_path / "link.json"))
    assert rc == 0 and (tmp_path / "link.json").is_symlink()
    assert load_trace(tmp_path / "target.json").source == "simulated"
    os.mkfifo(tmp_path / "fifo.json")
    for out, says in ((tmp_path / "fifo.json", "not a regular file"), ("/proc/ddpsim.json", "No such file")):
        rc, _, err = run_cli(capsys, "simulate", "--trace", TRACE, "--iters", "3", "--out", str(out))
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1 and f"cannot use {out}: {says}" in lines[0], err
    assert (tmp_path / "fifo.json").is_fifo()


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path):
    # `ddpsim simulate ... | head -1`: no "error: cannot use: Broken pipe"
    import re
    import subprocess
    import sys

    cmd = f"{sys.executable} -m ddpsim simulate --trace {TRACE} --no-calibrate | head -c 1"
    p = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert p.stdout == "s" and re.fullmatch(r"(simulated in [0-9.]+ s\n)?", p.stderr), (p.stdout, p.stderr)


def test_a_rank_speed_learnt_out_of_range_names_the_trace_fields(capsys, tmp_path):
    """A trace whose rank 0 used 5,000x the CPU time in its backward: the error named an internal setting
    ("synced_backward_scale 0 factor must be at most 1000") and nothing of the trace."""
    import json

    d = json.loads(open(TRACE).read())
    for it in d["ranks"][0]["iterations"]:
        it["backward_cpu_ns"] *= 5000
    (tmp_path / "bad.json").write_text(json.dumps(d))
    rc, out, err = run_cli(capsys, "simulate", "--trace", str(tmp_path / "bad.json"))
    assert rc == 2 and err.count("\n") == 1 and err.rstrip().endswith(
        "(rank 0's backward against the other ranks', learnt from the trace: check its backward and "
        "backward_cpu_ns times)"), err
