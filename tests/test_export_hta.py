"""HolisticTraceAnalysis (PyPI, pinned) reads ddpsim's per-rank export and agrees with ddpsim.

HTA's ``get_comm_comp_overlap`` is, per rank, the communication time that overlaps compute over
all communication time (its iterations weighted by their communication time); ddpsim's headline
overlap (``summarize``'s ``overlap_fraction``) is that, averaged over ranks. Checked: per rank to
within HTA's rounding, and the headline within 2 points of HTA's mean over ranks.
"""
import logging
from pathlib import Path

import pytest

from ddpsim import load_trace
from ddpsim.analysis import comm_weighted_overlap, summarize
from ddpsim.trace.export import steady_iterations, write_per_rank

hta = pytest.importorskip("hta.trace_analysis")
SAMPLES = Path(__file__).resolve().parents[1] / "ddpsim" / "samples"


def hta_on(trace, tmp_path):
    keep = steady_iterations(trace)
    write_per_rank(trace, tmp_path, keep)
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta.TraceAnalysis(trace_dir=str(tmp_path))
    overlap = analysis.get_comm_comp_overlap(visualize=False)
    breakdown = analysis.get_temporal_breakdown(visualize=False)
    return keep, dict(zip(overlap["rank"], overlap["comp_comm_overlap_pctg"])), breakdown


def _traces():
    out = {"simulated resnet50": load_trace(SAMPLES / "20_sim_resnet50_v100-eth25_w64_default.json"),
           "recorded mlp (CPU)": load_trace(SAMPLES / "01_mlp_torch_default.json"),
           "recorded transformer (CPU)": load_trace(SAMPLES / "06_transformer_torch_default.json"),
           "imported H100 resnet18 (gloo, 2 ranks)": load_trace(SAMPLES / "10_h100_resnet18_gloo_2ranks.json")}
    return out


TRACES = _traces()


@pytest.mark.parametrize("name", TRACES)
def test_hta_overlap_is_ddpsims(name, tmp_path):
    trace = TRACES[name]
    keep, hta_pct, breakdown = hta_on(trace, tmp_path)
    for rank in trace.ranks:  # the same definition: equal to within HTA's rounding
        ours = 100 * comm_weighted_overlap(rank, keep)
        assert abs(hta_pct[rank.rank] - ours) < 0.5, (rank.rank, hta_pct[rank.rank], ours)
    # the temporal breakdown saw every compute span: forward, backward compute, optimizer
    for rank in trace.ranks:
        compute_us = sum((it.forward.duration_ns + it.backward_compute_end_ns - it.backward.start_ns
                          + (it.optimizer.duration_ns if it.optimizer else 0)) / 1000
                         for it in rank.iterations if it.iteration in keep)
        row = breakdown[breakdown["rank"] == rank.rank].iloc[0]
        assert abs(row["compute_time(us)"] - compute_us) <= 0.01 * compute_us + 2 * len(keep)


@pytest.mark.parametrize("name", ["simulated resnet50", "recorded mlp (CPU)", "recorded transformer (CPU)",
                                  "imported H100 resnet18 (gloo, 2 ranks)"])
def test_hta_agrees_with_ddpsim_summary_within_2_points(name, tmp_path):
    trace = TRACES[name]
    _, hta_pct, _ = hta_on(trace, tmp_path)
    ours = 100 * summarize(trace)["overlap_fraction"]
    theirs = sum(hta_pct.values()) / len(hta_pct)
    assert abs(theirs - ours) < 2, (theirs, ours)


@pytest.mark.slow
def test_a_fresh_recording_exported_as_a_user_would(tmp_path):
    """record, then ``export --chrome --per-rank`` (steady iterations by default), then HTA."""
    from ddpsim.cli import main as cli

    run = tmp_path / "run.json"
    assert cli(["record", "--model", "transformer", "--world-size", "2", "--iters", "6", "--out", str(run)]) == 0
    assert cli(["export", "--chrome", str(run), str(tmp_path / "hta"), "--per-rank"]) == 0
    logging.getLogger("hta").setLevel(logging.ERROR)
    overlap = hta.TraceAnalysis(trace_dir=str(tmp_path / "hta")).get_comm_comp_overlap(visualize=False)
    theirs = overlap["comp_comm_overlap_pctg"].mean()
    ours = 100 * summarize(load_trace(run))["overlap_fraction"]
    assert abs(theirs - ours) < 2, (theirs, ours)
