"""The app on traces made by ``ddpsim import`` from the bundled H100 profiles (ddpsim/samples/h100):
what each page says must hold for a profile of one rank, where NCCL runs no kernel and the import, not
the model, numbers the parameters.
"""
import dataclasses

import pytest

from apputil import compare_page, with_uploads
from ddpsim import samples
from ddpsim.analysis import summarize
from ddpsim.app import beyond, timeline_notes, waiting, whatif, whatif_words
from ddpsim.trace import load_trace
from ddpsim.trace.profile_import import import_profiles
from ddpsim.viz import numbering

ONE = "resnet50_nccl_ws1"  # one rank, NCCL: its allreduces launched no GPU work
NO_KERNEL = "NCCL with one rank runs no kernel"  # from the import's own note (meta.import_notes)


@pytest.fixture(scope="module")
def one_rank():
    return import_profiles([samples.H100_DIR / f"{ONE}_rank0.kineto.json.gz"])


def learnt(trace, jitter: float):
    """The What-if's Base and workload for ``trace``, its learnt rank-to-rank spread set to ``jitter``
    (whatever ddpsim.learn makes of one rank, the sentence must name where the spread came from)."""
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    return base, dataclasses.replace(work, meta={**work.meta, "jitter_estimated": jitter})


def test_one_rank_spread_is_not_said_measured_between_ranks(one_rank):
    base, work = learnt(one_rank, 0.072)
    cfg = whatif.sim_config(base, None, "torch", False, 1, 8, "ib100", work=work, trace=one_rank)
    text = whatif_words.describe_stragglers(whatif.evaluate(work, base, one_rank, cfg))
    assert "rank-to-rank spread 7.2%, not measured: the recording holds one rank" in text
    assert "between the recorded ranks" not in text
    assert waiting.rank_noise("trace", "", learnt(one_rank, 0.0)[1], 8) == (0.0, "none measured: the recording holds one rank")
    two = load_trace(samples.BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json")
    assert waiting.rank_noise("trace", "", learnt(two, 0.05)[1], 8)[1] == "measured between the recorded ranks"


def test_far_caution_for_one_rank_says_nothing_was_fitted(one_rank):
    base, work = learnt(one_rank, 0.0)
    cfg = lambda net: whatif.sim_config(base, None, "torch", False, 1, 8, net, work=work, trace=one_rank)  # noqa: E731
    recorded = " ".join(whatif.cautions(base, one_rank, cfg(whatif.AS_RECORDED), work))  # NCCL on H100s: its node
    assert "it ran 1 rank, this asks for 8" in recorded and "the allreduce cost there is the network profile's" \
        in recorded
    assert "fitted at 1" not in recorded and "1 ranks" not in recorded and "NCCL on H100-SXM5 nodes" in recorded
    one_rank.meta["backend"] = "gloo"  # no node of its own: nothing known at 8 ranks
    try:
        recorded = " ".join(whatif.cautions(base, one_rank, cfg(whatif.AS_RECORDED), work))
    finally:
        one_rank.meta["backend"] = "nccl"
    assert "it ran 1 rank, this asks for 8" in recorded and "No network model was fitted" in recorded
    gloo_on_gpus = load_trace(samples.BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json")  # gloo, CUDA tensors
    assert not any("CPU run" in c for c in beyond.far_cautions(gloo_on_gpus, None, 2, 16, True))
    at = with_uploads({ONE: one_rank}, "whatif.py", ONE)
    next(s for s in at.select_slider if s.label.startswith("World size")).set_value(8).run()
    next(s for s in at.selectbox if s.label == "Network").set_value("ib100").run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    far = next(w.value for w in at.warning if w.value.startswith("Far beyond"))
    assert "it ran 1 rank," in far and "fitted" not in far and "the network profile's" in far


@pytest.fixture(scope="module")
def timeline(one_rank):
    at = with_uploads({ONE: one_rank}, "timeline.py", ONE)
    assert not at.exception and not at.error
    return at


def test_timeline_overlap_of_a_one_rank_nccl_import_is_none(timeline):
    overlap = next(m for m in timeline.metric if m.label.startswith("Comm. overlapped"))
    assert overlap.value == "none"  # as the What-if's metric and Compare's empty cell say: nothing to overlap


def test_timeline_shows_the_imports_notes_once(timeline, one_rank):
    assert any(NO_KERNEL in n for n in one_rank.meta["import_notes"])
    for note in one_rank.meta["import_notes"]:
        assert sum(note in i.value for i in timeline.info) == 1, note


def test_timeline_gpu_clock_note_of_an_import(timeline):
    clock = next(i.value for i in timeline.info if i.value.startswith("Times here are the GPU's"))
    assert "AccumulateGrad" in clock and "hook" not in clock  # an import's CPU time is its op's end
    assert "half the gradients within 0.00 ms of the time its AccumulateGrad op ended" in clock  # the median lag


def test_the_bundled_import_says_its_ranks_shared_one_gpu():
    """The r18 sample's two ranks ran on one H100 (samples/h100/README.md); nothing said so where it is read."""
    said = timeline_notes.import_notes(load_trace(samples.BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json"))
    assert "the two ranks ran on one H100" in said


def test_a_recorded_one_rank_trace_shows_no_import_note_and_no_overlap():
    """Note [One rank communicates nothing]: the recorded 1-rank NCCL spans (10-16 us of DDP's own
    bookkeeping, no kernel) are no communication to overlap, as HTA finds none in the profile."""
    trace = load_trace(samples.BUNDLED_DIR / "11_h200_resnet50_nccl_1rank.json")
    assert timeline_notes.import_notes(trace) is None
    assert 0 < trace.ranks[0].iterations[2].buckets[0].complete_ns - trace.ranks[0].iterations[2].buckets[0].launch_ns
    assert not timeline_notes.communicates(trace, 2)
    assert not summarize(trace)["communicates"]


def test_the_gpu_clock_note_follows_its_numbers():
    recorded = load_trace(samples.BUNDLED_DIR / "11_h200_resnet50_nccl_1rank.json")
    note = lambda med, top: timeline_notes.gpu_clock_note(recorded, {"median_ms": med, "max_ms": top}, 0.05)  # noqa: E731
    assert "The CPU ran ahead of the GPU: for each gradient, its hook ran a median 2.00 ms" in note(2.0, 5.0)
    assert "half the gradients within 0.00 ms of the time its hook ran, and the rest up to 5.00 ms" in note(0.0, 5.0)
    quiet = note(0.1, 0.2)  # under 1% of a 50 ms iteration
    assert "about the same" in quiet and "too soon" not in quiet


def test_compare_says_one_rank_may_leave_nothing_to_overlap(one_rank):
    other = load_trace(samples.BUNDLED_DIR / "10_h100_resnet18_gloo_2ranks.json")
    at = compare_page({ONE: one_rank, "resnet18": other})
    rows = at.dataframe[0].value
    assert rows["overlap (%)"].isna().tolist() == [True, False]
    assert any("no collective communicated (the noop hook, or one rank)" in c.value for c in at.caption)


def test_buckets_page_says_an_import_numbers_parameters_by_arrival(one_rank):
    at = with_uploads({ONE: one_rank}, "buckets.py", ONE)
    assert not at.exception and not at.error
    caption = next(c.value for c in at.caption if c.value.startswith("Left:"))
    assert "numbered the parameters by arrival" in caption and "reverse of its definition order" not in caption
    assert numbering(one_rank) == "arrival"
    modelled = dataclasses.replace(one_rank, meta={**one_rank.meta, "sizes": {"params": "model", "buckets": "model"}})
    assert numbering(modelled) == "model"
    assert numbering(load_trace(samples.BUNDLED_DIR / "01_mlp_torch_default.json")) == "definition"


def test_another_network_says_the_compute_loses_the_recorded_slowdown():
    """The H100 gloo import's compute ran 131% slower while its collectives ran (two ranks sharing a GPU,
    gloo copying through the host); a datasheet network drops that slowdown, so the what-if's backward
    was 20% shorter than recorded under a caution saying 'the compute from the recording'."""
    trace = load_trace(samples.sample_path(next(n for n in samples.list_samples() if "h100_resnet18" in n)))
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    said = " ".join(whatif.cautions(base, trace, whatif.sim_config(base, None, "torch", False, 1, 8, "ib100",
                                                                   work=work, trace=trace), work))
    assert (f"which ran {1 + work.link.interference:.2f}x as long while the recorded collectives ran, at its own "
            "speed here") in said
    assert work.link.interference > 0.5 and "(the chosen network's slowdown: 0%)" in said


def test_the_replay_line_of_a_one_rank_nccl_import_has_no_overlap_figure(one_rank):
    """The What-if page's metric, the Timeline and Compare say 'none' (no collective communicated), and
    `ddpsim import` 'no overlap to measure'; the replay line under them read 'overlap 0% against 0%'."""
    at = with_uploads({ONE: one_rank}, "whatif.py", ONE)
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert next(m for m in at.metric if m.label.startswith("Comm. overlapped")).value == "none"
    replay = next(c.value for c in at.caption if c.value.startswith("Replay error"))
    assert "0% against 0%" not in replay and replay.endswith("and no overlap to measure: no collective communicated."), replay


def test_more_ranks_are_not_faster_than_the_profiled_one(one_rank):
    """ResNet-50 profiled on one H100, asked for 8 on NVLink and 64 over InfiniBand: the page read
    "Iteration time -0.7%" (67.8 -> 67.4 ms) against the 1-rank replay, faster with more communication.
    The replay plays the three profiled steps one by one; at 8 ranks every rank's speed is drawn around
    the medians (67.3 ms with no network), and that difference was shown as the world size's. Now the
    unchanged run is simulated as the what-if is, and the replay stays the replay error's."""
    at = with_uploads({ONE: one_rank}, "whatif.py", ONE)
    next(s for s in at.selectbox if s.label == "Network").set_value("ib400").run()
    other = next(w.value for w in at.warning if w.value.startswith("The network is not the recorded one"))
    assert "One rank runs no collective: no network is used" in other and "1 ranks" not in other, other
    for ranks in (8, 64):
        next(s for s in at.select_slider if s.label.startswith("World size")).set_value(ranks).run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        delta = next(m for m in at.metric if m.label == "Iteration time").delta
        assert not delta.startswith("-"), (ranks, delta)  # communication adds time, never saves it
        said = next(m.value for m in at.markdown if m.value.startswith("Iteration time"))
        assert f"At {ranks} ranks there are no recorded ranks to replay step by step" in said, said
        assert "replayed 67.8 ms, and that difference (-0.5 ms) comes from the way of simulating" in said, said
        replay = next(c.value for c in at.caption if c.value.startswith("Replay error"))
        assert "replayed, simulates at 67.8 ms per iteration against 67.8 ms recorded (+0.0%)" in replay, replay
    base, work = whatif.base_for(one_rank), whatif.workload(whatif.base_for(one_rank), one_rank)
    out = whatif.evaluate(work, base, one_rank, whatif.sim_config(base, world_size=8, network="ib400", work=work, trace=one_rank))
    assert 0 < out.change["iteration_time_s"] < 0.01 and abs(out.replay_error["iteration_time_s"]) < 1e-3
    same = whatif.evaluate(work, base, one_rank, whatif.sim_config(base, world_size=1, work=work, trace=one_rank))
    assert same.replay_summary is None and same.change["iteration_time_s"] == 0.0  # the replay, as before
