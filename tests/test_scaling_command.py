"""``python -m ddpsim scaling``: the What-if page's scaling curve on the command line (ddpsim/cli/scaling.py),
run as a user runs it: the same rows as the page's curve (ddpsim/app/scaling.py), sizes it cannot price left
out with a note, and a one-line error on a bad list of sizes."""
import json
import math
import os
import pty
import subprocess
import sys

import pytest

from ddpsim import load_trace, samples
from ddpsim.app import scaling, whatif
from ddpsim.learn.scaling import WORLD_SIZES

UNCHANGED = dict(bucket_cap_mb=None, order="torch", find_unused_parameters=False, no_sync_every=1, algo=None,
                 broadcast_buffers=None, comm_hook=None, last_bucket_small=None)
GPU_PAIR = "10_h100_resnet18_gloo_2ranks"  # two H100 ranks over gloo: a GPU recording
ONE_RANK = "11_h200_resnet50_nccl_1rank"  # one rank of NCCL on an H200: no network to learn, its node's instead
GLOO_GPU = "10_h100_resnet18_gloo_2ranks"  # two gloo ranks on one H100: a network only at its own size


@pytest.fixture(autouse=True)
def bundled(monkeypatch):
    monkeypatch.delenv(samples.ENV_VAR, raising=False)


def command(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ddpsim", "scaling", *args], capture_output=True, text=True,
                          timeout=300)


def rows_of(done: subprocess.CompletedProcess) -> list[dict]:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])["rows"]


def same_rows(page: list[dict], cli: list[dict]) -> None:
    assert [r["world_size"] for r in cli] == [r["world_size"] for r in page]
    for p, c in zip(page, cli):
        assert c["nccl"] == p["nccl"], p["world_size"]
        for k in ("iteration_time_s", "compute_s", "exposed_comm_s", "waiting_s", "efficiency"):
            assert math.isclose(c[k], p[k], rel_tol=1e-4, abs_tol=1e-9), (p["world_size"], k, c[k], p[k])


def test_a_gpu_model_prints_the_pages_curve():
    done = command("--arch", "resnet50", "--hardware", "v100-eth25")
    cli = rows_of(done)
    base = whatif.Base("synthetic", "resnet50", "v100", "eth25", None, {"world_size": 64})
    page, notes = scaling.rows(base, None, whatif.workload(base, None), {**UNCHANGED, "network": "eth25"})
    assert notes == [] and [r["world_size"] for r in cli] == list(WORLD_SIZES)
    same_rows(page, cli)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("scaling resnet50@v100-eth25 (SIMULATED): the same options at 14 world sizes")
    last = lines[-2].split()  # the table's 100,000-rank row: ranks, four times in ms, efficiency, NCCL
    r = cli[-1]
    assert last[0] == "100,000" and float(last[1]) == pytest.approx(r["iteration_time_s"] * 1e3, abs=5e-4)
    assert sum(map(float, last[2:5])) == pytest.approx(float(last[1]), abs=2e-3)  # the parts add up
    assert last[5] == f"{r['efficiency']:.1%}" and last[6] == r["nccl"]


def test_a_recording_over_a_named_network_prints_the_pages_curve():
    path = samples.sample_path(GPU_PAIR)
    cli = rows_of(command("--trace", str(path), "--hardware", "h100-ib400", "--world-sizes", "64,1,8,2"))
    trace = load_trace(path)
    base = whatif.base_for(trace, GPU_PAIR)
    page, notes = scaling.rows(base, trace, whatif.workload(base, trace), {**UNCHANGED, "network": "ib400"},
                               sizes=[1, 2, 8, 64])
    assert notes == []
    same_rows(page, cli)
    assert cli[0]["efficiency"] == 1.0 and all(r["nccl"] for r in cli[1:])


def test_an_algorithm_that_does_not_run_at_a_size_is_nccls_choice_there_as_on_the_page():
    done = command("--arch", "resnet50", "--hardware", "h100-ib400", "--algo", "nvls", "--world-sizes", "1,8,16,64")
    cli = rows_of(done)
    base = whatif.Base("synthetic", "resnet50", "h100", "ib400", None, {"world_size": 64})
    page, notes = scaling.rows(base, None, whatif.workload(base, None), {**UNCHANGED, "network": "ib400", "algo": "nvls"},
                               sizes=[1, 8, 16, 64])
    assert notes == ["nvls does not run at 16 and 64 ranks on h100: NCCL's choice there"]
    same_rows(page, cli)
    assert [r["nccl"] for r in cli] == ["", "nvls/Simple", "nvls_tree/Simple", "nvls_tree/Simple"]
    assert done.stderr.splitlines() == ["note: nvls does not run at 16, 64 ranks: NCCL's choice there"]


def test_sizes_without_a_network_are_left_out_with_a_note():
    done = command("--trace", str(samples.sample_path(GLOO_GPU)), "--world-sizes", "1,2,8,64")
    assert [r["world_size"] for r in rows_of(done)] == [1, 2]
    assert ("note: 8, 64 ranks left out: the trace is a GPU trace and has no calibration at 8 ranks (give "
            "--hardware GPU-NETWORK or --bandwidth-gbps G)") in done.stderr.splitlines()


def test_an_nccl_recording_goes_to_its_gpus_nodes_and_says_so_once():
    """learn/hardware.py Note [A GPU recording at another world size]: the 1-rank H200 recording at every size,
    as --hardware h100-nvlink gives it, with one line for all the sizes it did not run."""
    done = command("--trace", str(samples.sample_path(ONE_RANK)), "--world-sizes", "1,8,64,1024")
    named = command("--trace", str(samples.sample_path(ONE_RANK)), "--world-sizes", "1,8,64,1024",
                    "--hardware", "h100-nvlink")
    rows, by_name = rows_of(done), rows_of(named)  # at 1 rank the recording keeps its own collectives' cost
    assert [r["world_size"] for r in rows] == [1, 8, 64, 1024] and rows[0]["exposed_comm_s"] > 0
    assert [{**r, "efficiency": 0} for r in rows[1:]] == [{**r, "efficiency": 0} for r in by_name[1:]]
    assert rows[-1]["exposed_comm_s"] > rows[1]["exposed_comm_s"] > 0 and rows[1]["nccl"] == "nvls/Simple"
    said = [line for line in done.stderr.splitlines() if "nothing was measured" in line]
    assert said == ["nothing was measured beyond the recorded 1 rank: at other world sizes the allreduce is NCCL on "
                    "H100-SXM5 nodes: NVLink x8, 8 x InfiniBand NDR 400Gb/s per node (as --hardware h100-nvlink; "
                    "another network: --hardware or --bandwidth-gbps)"], done.stderr


@pytest.mark.parametrize("sizes, says", [("1,x", "wants integers separated by commas"),
                                         ("0,4", "wants world sizes between 1 and 10,000,000 ranks"),
                                         ("2,,4", "--world-sizes wants integers separated by commas"),  # not 2,4
                                         ("", "--world-sizes wants integers")])  # not the default list
def test_a_bad_list_of_sizes_is_one_line(sizes, says):
    done = command("--arch", "resnet50", "--world-sizes", sizes)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and says in done.stderr and "Traceback" not in done.stderr


def test_sizes_too_many_for_the_shared_cores_are_left_out_not_the_whole_table(tmp_path):
    """A CPU recording with a calibration prices every size, but ranks sharing its 2 cores are simulated one by
    one, at most 64: the default sizes ended in that one error, after the measurement, and printed no table."""
    from ddpsim.experiments.calibrate import combine, fit_calibration
    from ddpsim.trace import save_trace

    def entry(k, a, b):
        rows = [(n, a + b * n, 1e-4 + 5e-10 * n) for n in (4096, 1 << 20, 8 << 20)]
        return {**fit_calibration(rows, k, turn=0.004), "host_cpus": 2}

    trace = load_trace(samples.sample_path("01_mlp_torch_default"))
    trace.meta["calibration"] = combine({2: entry(2, 2e-3, 1e-9), 4: entry(4, 6e-3, 2e-9)}, turn=0.004)
    save_trace(trace, tmp_path / "calibrated.json")
    done = command("--trace", str(tmp_path / "calibrated.json"), "--world-sizes", "2,4,128,1024", "--iters", "3")
    assert [r["world_size"] for r in rows_of(done)] == [2, 4]
    assert "note: 128, 1,024 ranks left out: 128 ranks sharing 2 CPU cores" in done.stderr, done.stderr


def test_an_option_the_recording_cannot_run_with_is_one_error_not_a_note_per_size():
    done = command("--trace", str(samples.sample_path("04_branchy_torch_find_unused")), "--world-sizes", "1,2",
                   "--no-find-unused-parameters")
    assert done.returncode == 2 and done.stdout == "" and "note:" not in done.stderr
    assert done.stderr.splitlines()[-1].startswith("ddpsim scaling: error: --no-find-unused-parameters: branch.0.weight")


def test_a_terminal_sees_a_progress_bar_and_a_pipe_does_not():
    reader, terminal = pty.openpty()
    try:
        done = subprocess.run([sys.executable, "-m", "ddpsim", "scaling", "--arch", "resnet50", "--world-sizes", "1,2"],
                              stdout=subprocess.PIPE, stderr=terminal, text=True, timeout=300)
        seen = os.read(reader, 65536).decode()
    finally:
        os.close(reader)
        os.close(terminal)
    assert len(rows_of(done)) == 2
    assert "simulating [" in seen and seen.rstrip().endswith("2/2 world sizes"), seen
    assert command("--arch", "resnet50", "--world-sizes", "1,2").stderr == ""  # a pipe: no bar
