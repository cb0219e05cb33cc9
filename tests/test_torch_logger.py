"""The recording against torch's own DDP logger (ddpsim/analysis/torch_logger.py, Note [Torch's logger as a
second clock]): on the bundled torch recordings the two clocks agree on the iteration torch timed."""
import json

import pytest

from ddpsim.analysis.torch_logger import KEYS, against_torch_logger, logged_iteration, logger_line
from ddpsim.cli import main as cli
from ddpsim.cli.headline import headline_lines
from ddpsim.samples import BUNDLED_DIR
from ddpsim.trace import CARRIED, load_trace
from ddpsim.trace.checks import LOGGED_INTS

TORCH_RUNS = ["01_mlp_torch_default", "02_mlp_torch_cap0.25", "03_shuffled_torch_default",
              "04_branchy_torch_find_unused", "05_convnet_torch_no_sync3", "06_transformer_torch_default",
              "11_h200_resnet50_nccl_1rank"]  # the bundled recordings of torch's DDP with its logging data


def sample(name):
    return load_trace(BUNDLED_DIR / f"{name}.json")


@pytest.mark.parametrize("name", TORCH_RUNS)
def test_the_recording_agrees_with_torchs_logger(name):
    """Every rank, every duration within 1.5 ms; the communication within 0.5 ms (measured: 1.03 and
    0.17 ms at most). On the CPU runs timing the wrong iteration misses by ms (the MLP's next one
    communicates 3.6 ms longer); the H200 run's iterations are too alike to tell."""
    trace = sample(name)
    rows = against_torch_logger(trace)
    assert [r["rank"] for r in rows] == [r.rank for r in trace.ranks]
    for row in rows:
        for key in KEYS:
            limit = 0.5e-3 if key == "backward_comm_time" else 1.5e-3
            assert abs(row["torch"][key] - row["recorded"][key]) <= limit, (row["rank"], key, row)


def test_the_logged_iteration_counts_synced_forwards():
    """The logger reports, at a synced forward, the synced iteration before it: the MLP's fifth step logs
    the fourth (iteration 3); with a sync every 3 micro-steps the second sync logs the first (iteration 2)."""
    for name, want in (("01_mlp_torch_default", 3), ("05_convnet_torch_no_sync3", 2)):
        trace = sample(name)
        assert [logged_iteration(trace, r).iteration for r in trace.ranks] == [want, want]


def test_record_prints_torchs_timing_beside_its_own():
    trace = sample("01_mlp_torch_default")
    line = logger_line(trace)
    assert line in headline_lines(trace, "wrote run.json")
    row = against_torch_logger(trace)[0]
    assert line.startswith(f"torch's own DDP logger timed iteration 3 on rank 0: forward "
                           f"{row['torch']['forward_compute_time'] * 1e3:.1f} ms, ")
    assert "(the largest difference over 2 ranks: " in line


def test_what_cannot_be_compared_is_left_out():
    """A rank whose logging data holds an error (its iteration key is the count at the error), and a
    host-timed iteration without the launches' return times (older recordings)."""
    trace = sample("01_mlp_torch_default")
    trace.ranks[0].ddp_logging_data = {**trace.ranks[0].ddp_logging_data, "has_error": 1, "error": "boom"}
    for b in trace.ranks[1].iteration(3).buckets:
        b.launch_end_ns = None
    assert against_torch_logger(trace) == [] and logger_line(trace) is None


def test_static_graphs_first_iteration_stamps_compute_end_and_comm_start_together():
    """``delay_all_reduce`` stamps both as it begins (Note [The runtime timer]): no overlap, and the
    communication from the last gradient ready, whatever the recorded launches."""
    from ddpsim.analysis.torch_logger import recorded_as_torch

    it = sample("01_mlp_torch_default").ranks[0].iteration(3)
    got = recorded_as_torch(it, delayed=True)
    assert got["backward_compute_comm_overlap_time"] == 0
    assert got["backward_comm_time"] == pytest.approx((it.backward.end_ns - it.backward_compute_end_ns) * 1e-9)
    assert got["backward_compute_time"] == pytest.approx((it.backward_compute_end_ns - it.backward.start_ns) * 1e-9)


@pytest.mark.parametrize("name", ["07_mlp_minddp_default", "10_h100_resnet18_gloo_2ranks",
                                  "20_sim_resnet50_v100-eth25_w64_default"])
def test_no_line_without_torchs_timings(name):
    """Older minddp recordings, an import from profiles and a simulation carry no timing keys."""
    trace = sample(name)
    assert against_torch_logger(trace) == [] and logger_line(trace) is None
    assert not any(line.startswith("torch's own DDP logger") for line in headline_lines(trace, "wrote run.json"))


def test_the_reader_checks_every_key_the_comparison_reads():
    assert set(KEYS) <= set(LOGGED_INTS)


@pytest.mark.parametrize("key, value", [("backward_compute_comm_overlap_time", None), ("forward_compute_time", "7 ms"),
                                        ("iteration", 2.5), ("static_graph", "yes")])
def test_logging_data_of_the_wrong_type_is_refused_by_import_before_anything_is_written(tmp_path, capsys, key, value):
    """A torch recording exported to Chrome (carrying its trace) with one logging-data value broken: ``import``
    refuses it in one line naming the file and the field, and writes nothing; it never traces back after
    writing its output, as it did multiplying a null duration."""
    chrome, out = tmp_path / "chrome.json", tmp_path / "imported.json"
    assert cli(["export", "--chrome", str(BUNDLED_DIR / "01_mlp_torch_default.json"), str(chrome)]) == 0
    data = json.loads(chrome.read_text())
    data[CARRIED]["ranks"][1]["ddp_logging_data"][key] = value
    chrome.write_text(json.dumps(data))
    capsys.readouterr()
    assert cli(["import", str(chrome), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and not out.exists(), err
    assert f"chrome.json: field ranks[1].ddp_logging_data.{key}: should be an integer" in err[0]


def test_a_trace_built_in_memory_with_a_null_duration_is_left_out_not_a_crash():
    """The reader refuses such a trace; one built in memory (an analysis of a recorder's own) is not read,
    so the comparison leaves that rank out rather than multiplying None."""
    trace = sample("01_mlp_torch_default")
    trace.ranks[0].ddp_logging_data = {**trace.ranks[0].ddp_logging_data, "backward_compute_comm_overlap_time": None}
    assert [r["rank"] for r in against_torch_logger(trace)] == [1]
    assert "(the largest difference over 1 rank: " in logger_line(trace)
