"""Seeing a comm hook: the simulated trace carries the hook's collectives and compute as a recording
does (sim/hooktrace.py), the Timeline draws them inside the bucket's span (viz/hookspan.py), and
the Compare figure, table and page put hooks side by side."""
import re

import pytest
from apputil import compare_page

from ddpsim.sim import SimConfig, simulate
from ddpsim.sim.archs import synthetic
from ddpsim.sim.comm_hooks import CommHook, compute_s, device_rates, stages
from ddpsim.trace import load_trace, save_trace
from ddpsim.viz import compare_rows, plot_compare, plot_timeline
from ddpsim.viz.hookspan import size_text

WORLD, RATES = 4, device_rates(900, 15)  # a V100's memory bandwidth and fp32 rate: the hooks' compute costs


@pytest.fixture(scope="module")
def runs():
    w = synthetic("resnet50", "v100-eth25")
    cfgs = {"none": {}, "fp16": {"comm_hook": "fp16"}, "powersgd": {"comm_hook": "powersgd", "powersgd_start_iter": 1},
            "round-robin:2": {"comm_hook": "round-robin:2"}, "noop": {"comm_hook": "noop"}}
    return {k: simulate(w, SimConfig(world_size=WORLD, iters=3, hook_rates=RATES, **c))[0] for k, c in cfgs.items()}


def synced(trace):
    """(synced step, iteration) of rank 0's synced iterations."""
    its = [it for it in trace.ranks[0].iterations if it.sync]
    return list(enumerate(its))


def shapes_of(trace, it, bucket):
    layout = trace.ranks[0].layout_at(it.iteration)
    by_index = {p.index: p for p in trace.params}
    return [tuple(by_index[p].shape) for p in layout.buckets[bucket].params]


@pytest.mark.parametrize("name,dtype", [("fp16", "float16"), ("powersgd", "float32"), ("round-robin:2", "float32")])
def test_the_simulated_collectives_are_what_the_hook_sends(runs, name, dtype):
    trace = runs[name]
    hook = CommHook.parse(name, powersgd_start_iter=1)
    n_stages = set()
    for step, it in synced(trace):
        for b in it.buckets:
            shapes = shapes_of(trace, it, b.bucket)
            sent = stages(hook, shapes, 4, step)
            n_stages.add(len(sent))
            assert [c.bytes for c in b.collectives] == [n for stage in sent for n in stage]
            group = str(b.bucket % hook.groups)
            assert all((c.op, c.dtype, c.group, c.group_size) == ("all_reduce", dtype, group, WORLD)
                       for c in b.collectives)
            assert all(b.launch_ns <= c.launch_ns <= c.complete_ns <= b.complete_ns for c in b.collectives)
            assert b.compress_ns == b.collectives[0].launch_ns - b.launch_ns
            assert b.decompress_ns == b.complete_ns - b.collectives[-1].complete_ns
            after = compute_s(hook, shapes, 4, step, RATES)[2]
            assert b.decompress_ns == pytest.approx(after * 1e9, abs=2)  # the callback's compute after the last
    if name == "powersgd":
        assert n_stages == {1, 3}  # the plain allreduce in step 0, then PowerSGD's three stages


def test_noop_sends_nothing_and_a_plain_run_has_no_hook_fields(runs):
    for _, it in synced(runs["noop"]):
        assert all(b.collectives == [] and b.decompress_ns == 0 for b in it.buckets)
    plain = runs["none"].to_dict()
    assert all(not {"collectives", "compress_ns", "decompress_ns"} & set(b)
               for r in plain["ranks"] for it in r["iterations"] for b in it["buckets"])


def test_a_hooked_simulation_writes_and_reads_back(runs, tmp_path):
    for name in ("fp16", "powersgd", "noop"):
        save_trace(runs[name], tmp_path / f"{name}.json")
        back = load_trace(tmp_path / f"{name}.json")
        assert back.to_dict() == runs[name].to_dict()
        assert back.meta["options"]["comm_hook"] == name


def patches(fig, prefix):
    return {p.get_gid(): p for ax in fig.axes for p in ax.patches if (p.get_gid() or "").startswith(prefix)}


@pytest.mark.parametrize("name", ["fp16", "powersgd"])
def test_the_timeline_draws_each_collective_inside_its_buckets_span(runs, name):
    trace = runs[name]
    step, it = synced(trace)[-1]
    fig = plot_timeline(trace, it.iteration, ranks=[0])
    spans, hooks = patches(fig, "allreduce:r0:"), patches(fig, "hook:r0:")
    for b in it.buckets:
        span = spans[f"allreduce:r0:b{b.bucket}"]
        lo, hi = span.get_x(), span.get_x() + span.get_width()
        mine = {g: p for g, p in hooks.items() if re.fullmatch(rf"hook:r0:b{b.bucket}:c\d+", g)}
        assert len(mine) == len(b.collectives)
        for p in mine.values():
            assert lo - 1e-9 <= p.get_x() <= p.get_x() + p.get_width() <= hi + 1e-9
            assert span.get_y() <= p.get_y() and p.get_y() + p.get_height() <= span.get_y() + span.get_height()
        if b.decompress_ns:
            assert f"hook:r0:b{b.bucket}:decompress" in hooks
    first = it.buckets[-1].collectives[0]  # zoomed in on, its label fits: what it sent
    window = tuple((t - it.forward.start_ns) * 1e-6 for t in (first.launch_ns, first.complete_ns))
    labels = [t.get_text() for t in plot_timeline(trace, it.iteration, ranks=[0], window=window).axes[0].texts]
    assert f"b{it.buckets[-1].bucket} {'fp16' if name == 'fp16' else 'fp32'} {size_text(first.bytes)}" in labels
    assert not patches(plot_timeline(runs["none"], it.iteration, ranks=[0]), "hook:")


def test_sizes_read_as_labels():
    assert [size_text(n) for n in (512, 12_288, 2_000_000, 1_300_000_000)] == ["512 B", "12 KB", "2.0 MB", "1.3 GB"]


def test_round_robin_names_the_group_of_its_collectives(runs):
    _, it = synced(runs["round-robin:2"])[-1]
    c = it.buckets[1].collectives[0]  # bucket 1: group 1 mod 2
    window = tuple((t - it.forward.start_ns) * 1e-6 for t in (c.launch_ns, c.complete_ns))
    fig = plot_timeline(runs["round-robin:2"], it.iteration, ranks=[0], window=window)
    assert f"b1 g1 fp32 {size_text(c.bytes)}" in [t.get_text() for t in fig.axes[0].texts]


def test_compare_puts_hooks_side_by_side(runs):
    picked = [(k, runs[k]) for k in ("none", "fp16", "powersgd", "noop")]
    rows = {r["run"]: r for r in compare_rows(picked)}
    assert {k: r["comm_hook"] for k, r in rows.items()} == {"none": "none", "fp16": "fp16", "powersgd": "powersgd",
                                                            "noop": "noop"}
    total = sum(b.bytes for b in synced(runs["none"])[-1][1].buckets)
    assert rows["none"]["sent_bytes"] == total and rows["fp16"]["sent_bytes"] == total // 2
    assert 0 < rows["powersgd"]["sent_bytes"] < total // 10 and rows["noop"]["sent_bytes"] == 0
    # the noop run sent nothing: no overlap to give (0% would read as "all of it exposed"), no delta
    assert rows["noop"]["overlap_pct"] is None and rows["noop"]["d_overlap_pts"] is None
    assert 0 <= rows["fp16"]["overlap_pct"] <= 100 and rows["fp16"]["d_overlap_pts"] is not None
    fig = plot_compare(picked)
    assert patches(fig, "hook:r0:") and any(g.endswith(":c2") for g in patches(fig, "hook:r0:"))
    assert "hook's collective" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_the_compare_page_has_a_comm_hook_column(runs):
    at = compare_page({"plain run": runs["none"], "fp16 run": runs["fp16"], "noop run": runs["noop"]})
    assert not at.exception, [e.message for e in at.exception]
    df = at.dataframe[0].value
    assert list(df["comm hook"]) == ["none", "fp16", "noop"]
    assert df["overlap (%)"].isna().tolist() == [False, False, True]  # noop: empty, not 0%
    assert df["Δ overlap (pts)"].isna().tolist() == [False, False, True]
    assert 0 <= df["overlap (%)"].iloc[1] <= 100
    assert df["sent per step (MB)"].iloc[1] == pytest.approx(df["sent per step (MB)"].iloc[0] / 2, rel=1e-3)


def test_a_recorded_hooks_compute_and_overlapping_collectives_are_drawn_apart():
    """A bucket as ``record --comm-hook`` writes it: a cast before, a cast back after, two collectives
    in flight together on two process groups."""
    from matplotlib.figure import Figure

    from ddpsim.trace import BucketEvent, HookCollective
    from ddpsim.viz.hookspan import draw_hooked_bucket

    cols = [HookCollective("all_reduce", 2_000_000, "float16", "0", 2, 200, 700),
            HookCollective("all_reduce", 1_000_000, "float16", "1", 2, 300, 800)]
    b = BucketEvent(3, 6_000_000, 0, 0, 1000, 250, collectives=cols, compress_ns=200, decompress_ns=200)
    ax = Figure().add_subplot()
    draw_hooked_bucket(ax, 0, b, 0.0, 1.0, lambda t: t / 1000, 0.0)
    got = patches(ax.figure, "hook:r0:b3:")
    assert (got["hook:r0:b3:compress"].get_x(), got["hook:r0:b3:compress"].get_width()) == (0.0, 0.2)
    assert got["hook:r0:b3:decompress"].get_x() == pytest.approx(0.8)
    c0, c1 = got["hook:r0:b3:c0"], got["hook:r0:b3:c1"]
    assert c0.get_y() != c1.get_y() and c0.get_height() == c1.get_height() < 0.5  # one sub-lane each
    assert {t.get_text() for t in ax.texts} == {"b3 fp16 2.0 MB", "g1 fp16 1.0 MB"}
