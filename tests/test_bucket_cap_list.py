"""torch 2.13's bucket caps, exactly: bucket_cap_mb_list and the edge values of bucket_cap_mb.

The oracle is torch itself: its ``_BucketCapacityConfig`` (through torchcompat) for the caps and
limits, and real DDP on two gloo ranks for the layouts, read from its logging data (the
construction layout's bucket sizes, the rebuilt layout's parameter indices). minddp, run beside
it on the same ranks, and ``ddpsim.buckets`` (the simulator's layouts) must agree, and refuse
what torch refuses. Note [Caps torch takes] in ddpsim/buckets.py says what was found.
"""
import dataclasses
import math

import pytest
import torch
from torch import nn

from ddpsim import torchcompat
from ddpsim.buckets import BucketCapacityConfig, TensorSpec, construction_layout, rebuilt_layout
from ddpsim.ranks import run_ranks
from torchgates import HAS_CAPACITY_CONFIG, needs_capacity_config, needs_ddp

LIST = [0.001, 0.01]  # MiB: 1048 and 10485 bytes; the model's parameters are 256 to 4096 bytes
CASES = [  # (bucket_cap_mb, bucket_cap_mb_list, find_unused_parameters, static_graph)
    (None, LIST, False, False), (None, LIST, True, False), (None, LIST, False, True),
    (None, [0.003, 0.001, 0.005], False, False),  # three caps, then the last repeats
    (None, [0.001] * 10, False, False),  # more caps than buckets
    (0.002, LIST, True, False),  # bucket_cap_mb is ignored beside a list
    (None, [], False, False), (0.002, [], True, False),  # an empty list is no list
    (None, [0, 0.01], False, False), (None, [0.01, 0], False, False), (None, [1e-9], True, False),
    (None, [-1e-9, 0.01], False, False),  # truncated to 0 bytes: taken
    (None, [-1, 0.01], False, False), (None, [0.01, -1], False, True),  # refused
    (0, None, False, False), (0, None, True, False), (0, None, False, True),
    (1e-9, None, False, False), (1e-9, None, True, False), (-1e-9, None, True, False),
    (-1, None, False, False), (-1, None, False, True), (-1, None, True, True),  # taken: one bucket
    (-1, None, True, False),  # refused
    (float("inf"), None, False, False), (float("nan"), None, False, False), (1e13, None, False, False),
    (8e12, None, True, False), (True, None, True, False),
]
SIZES = (16, 24, 8, 32, 12, 20)  # Linear(k, k) without bias: 1024, 2304, 256, 4096, 576, 1600 bytes


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(k, k, bias=False) for k in SIZES)

    def forward(self, x):
        for layer in self.layers:
            x = layer(nn.functional.pad(x, (0, max(0, layer.in_features - x.shape[1])))[:, :layer.in_features])
        return x.sum()


def _train(make, then=None):
    """(construction buckets, buckets after 4 iterations) as [(params, bytes)], or the error's type;
    and ``then(ddp)`` after them, if given."""
    try:
        ddp = make(Chain())
    except Exception as e:  # noqa: BLE001 - what torch raises is the fact measured
        return type(e).__name__
    layouts = [_layout(ddp)]
    for _ in range(4):  # static_graph rebuilds at iteration 2's forward
        ddp(torch.randn(2, 32)).backward()
    return layouts + [_layout(ddp)] + ([then(ddp)] if then else [])


def _layout(ddp):
    if isinstance(ddp, nn.parallel.DistributedDataParallel):
        d = torchcompat.ddp_logging_data(ddp)
        sizes = [int(s) for s in d["bucket_sizes"].split(", ")]
        if "rebuilt_per_bucket_param_indices" not in d:
            return [(None, s) for s in sizes]  # construction: torch logs the sizes only
        params = [[int(i) for i in b.split()] for b in d["rebuilt_per_bucket_param_indices"].split(", ")]
        return list(zip(params, [int(s) for s in d["rebuilt_bucket_sizes"].split(", ")]))
    return [(list(b.variable_indices), b.nbytes) for b in ddp.reducer.buckets]


def _both(rank, world):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    out = []
    for cap, caps, fu, static in CASES:
        opts = dict(bucket_cap_mb=cap, bucket_cap_mb_list=caps, find_unused_parameters=fu, static_graph=static)
        out.append((_train(lambda m: nn.parallel.DistributedDataParallel(m, **opts)),
                    _train(lambda m: MinDDP(m, **opts))))
    return out


def _sizes(layout):
    return [s for _, s in layout]


@pytest.mark.slow
@needs_ddp("bucket_cap_mb_list")
def test_minddp_and_the_simulator_build_torchs_layouts_and_refuse_what_it_refuses():
    results = run_ranks(_both, 2, timeout=240)
    assert results[0] == results[1]
    for (cap, caps, fu, static), (theirs, ours) in zip(CASES, results[0]):
        case = f"bucket_cap_mb={cap} bucket_cap_mb_list={caps} find_unused={fu} static_graph={static}"
        if cap == 0 and not HAS_CAPACITY_CONFIG:  # 2.13 takes 0, as minddp does; 2.11 asserts "bucket_cap_mb
            assert theirs == "AssertionError", case  # should be set by now" (its `if not bucket_cap_mb`)
            continue
        if isinstance(theirs, str):  # torch refused it: so do minddp and the simulator, with a ValueError
            assert ours == "ValueError", (case, theirs, ours)
            with pytest.raises(ValueError):
                BucketCapacityConfig.create(cap, caps).compute_bucket_size_limits(static, fu)
            continue
        assert not isinstance(ours, str), (case, ours)
        assert _sizes(ours[0]) == _sizes(theirs[0]) and _sizes(ours[1]) == _sizes(theirs[1]), case
        specs, config = [TensorSpec(k * k * 4) for k in SIZES], BucketCapacityConfig.create(cap, caps)
        assert construction_layout(specs, config, static, fu)[0] == [p for p, _ in ours[0]], case
        if theirs[1][0][0] is None:  # never rebuilt (find_unused_parameters)
            assert ours[1] == ours[0], case
            continue
        assert ours[1] == theirs[1], case
        ready = [i for params, _ in theirs[1] for i in params]  # one dtype: the buckets in ready order
        assert rebuilt_layout(specs, ready, config)[0] == [p for p, _ in theirs[1]], case


OPTIONS = [(cap, caps) for cap, caps, _, _ in CASES] + [(25, None), (None, None), (None, (0.5, 2))]


@needs_capacity_config
@pytest.mark.parametrize("cap, caps", OPTIONS)
@pytest.mark.parametrize("find_unused, static", [(False, False), (True, False), (False, True)])
def test_caps_and_limits_are_torchs(cap, caps, find_unused, static):
    try:
        theirs = torchcompat.torch_bucket_limits(cap, caps, static, find_unused)
    except (OverflowError, ValueError):  # int() of inf or nan
        with pytest.raises(ValueError, match="finite"):
            BucketCapacityConfig.create(cap, caps)
        return
    nbytes = [theirs["bucket_bytes_cap"], theirs["first_bucket_bytes_cap"], *theirs["per_bucket_bytes_caps"]]
    if min(theirs["construction"]) < 0 or not all(-2 ** 63 <= n < 2 ** 63 for n in nbytes):
        # torch's size_t bucket assignment, or its int64 Reducer, refuses it next in the constructor
        with pytest.raises(ValueError, match="negative|int64|>= 0 MiB"):
            BucketCapacityConfig.create(cap, caps).compute_bucket_size_limits(static, find_unused)
        return
    ours = BucketCapacityConfig.create(cap, caps)
    assert (ours.bucket_bytes_cap, ours.per_bucket_bytes_caps, ours.first_bucket_bytes_cap) == (
        theirs["bucket_bytes_cap"], theirs["per_bucket_bytes_caps"], theirs["first_bucket_bytes_cap"])
    assert list(ours.compute_bucket_size_limits(static, find_unused)) == [theirs["construction"], theirs["rebuild"]]


def test_edge_values_and_their_errors_are_one_line():
    mib = 2 ** 20
    assert BucketCapacityConfig.create(0) == BucketCapacityConfig.create(1e-9) == BucketCapacityConfig(0, (), 0)
    neg = BucketCapacityConfig.create(-1)
    assert neg.rebuild_limits() == [2 ** 63 - 1] * 2  # reducer.cpp's size_t: no bucket reaches it
    assert BucketCapacityConfig.create(None, []) == BucketCapacityConfig.create(None)
    listed = BucketCapacityConfig.create(float("inf"), [1, 0.5])  # bucket_cap_mb is not read beside a list
    assert listed == BucketCapacityConfig(mib, (mib, mib // 2), mib)
    for bad, words in [(float("nan"), "finite"), ("5", "number"), (1e13, "int64")]:
        with pytest.raises(ValueError, match=words) as e:
            BucketCapacityConfig.create(bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="list of numbers"):
        BucketCapacityConfig.create(None, "1 5")
    with pytest.raises(ValueError, match="choose one"):
        BucketCapacityConfig.create(None, [1], first_bucket_cap_mb=1)
    assert math.isclose(BucketCapacityConfig.create(None, [1, 5, 25]).bucket_bytes_cap, 25 * mib)


def _layouts(trace) -> list:
    return [(lay.kind, lay.from_iteration, [(list(b.params), b.cap_bytes) for b in lay.buckets])
            for lay in trace.ranks[0].layouts]


@pytest.mark.slow
@needs_ddp("bucket_cap_mb_list")
def test_record_then_simulate_with_a_list(record, tmp_path, capsys):
    """The user's path: record --bucket-cap-mb-list, simulate --trace replays it, a what-if changes it."""
    from ddpsim.__main__ import main
    from ddpsim.learn import learn, replay_config, simulate
    from ddpsim.trace import load_trace

    caps = [0.05, 0.2]  # MiB: mlp's 2-4 MiB layers get a bucket of two, its 2-40 KiB head one of its own
    trace = record(model="mlp", world_size=2, iters=3, bucket_cap_mb_list=caps)
    assert trace.meta["options"]["bucket_cap_mb_list"] == trace.meta["config"]["bucket_cap_mb_list"] == caps
    mine = record(name="minddp", model="mlp", world_size=2, iters=3, impl="minddp", bucket_cap_mb_list=caps)
    assert _layouts(mine) == _layouts(trace)  # buckets and caps, construction and rebuilt
    kinds = [k for k, _, _ in _layouts(trace)]
    assert kinds == ["construction", "rebuilt"] and len(trace.ranks[0].layouts[0].buckets) > 1
    w = learn(trace)
    computed = dataclasses.replace(w, meta={k: v for k, v in w.meta.items() if k != "recorded_layouts"})
    simulated, _ = simulate(computed, replay_config(computed, trace))  # ddpsim.buckets, not the recording
    assert _layouts(simulated) == _layouts(trace)
    assert replay_config(w, trace, bucket_cap_mb=5).bucket_cap_mb_list is None  # another cap: not the list
    out = tmp_path / "sim.json"
    assert main(["simulate", "--trace", str(tmp_path / "run.json"), "--bucket-cap-mb-list", "0.01",
                 "--out", str(out)]) == 0
    what_if = load_trace(out)
    assert what_if.meta["options"]["bucket_cap_mb_list"] == [0.01]
    sizes = {p.index: p.bytes for p in trace.params if p.index is not None}
    for lay in what_if.ranks[0].layouts:  # every bucket closed at 0.01 MiB but the one left over
        assert sum(sum(sizes[i] for i in b.params) < 10485 for b in lay.buckets) <= 1 < len(lay.buckets)
    capsys.readouterr()


def test_simulate_says_a_cap_given_beside_a_list_is_not_used(capsys):
    """Both flags ran in silence with the list alone, as torch's DDP takes both arguments."""
    from ddpsim.__main__ import main
    from ddpsim.samples import BUNDLED_DIR

    mlp = str(BUNDLED_DIR / "01_mlp_torch_default.json")
    assert main(["simulate", "--trace", mlp, "--bucket-cap-mb", "5", "--bucket-cap-mb-list", "1", "2"]) == 0
    both = capsys.readouterr()
    assert "note: --bucket-cap-mb 5 is not used: --bucket-cap-mb-list replaces it" in both.err, both.err
    assert main(["simulate", "--trace", mlp, "--bucket-cap-mb-list", "1", "2"]) == 0
    alone = capsys.readouterr()
    assert "note:" not in alone.err and alone.out.splitlines()[-1] == both.out.splitlines()[-1]  # the list's run


def test_a_run_without_a_list_writes_what_it_wrote_before():
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.meta import rank_header

    head = rank_header(RecordConfig(), "gloo", 2)
    assert "bucket_cap_mb_list" not in head["options"] and "bucket_cap_mb_list" not in head["config"]
    head = rank_header(RecordConfig(bucket_cap_mb_list=[1, 5]), "gloo", 2)
    assert head["options"]["bucket_cap_mb_list"] == head["config"]["bucket_cap_mb_list"] == [1, 5]


def test_record_refuses_a_cap_its_trace_could_not_hold():
    """torch ignores bucket_cap_mb beside a list, nan included; a trace cannot hold nan, so record refuses it."""
    from ddpsim.errors import CLIError
    from ddpsim.record.config import RecordConfig

    for bad in (float("nan"), float("inf")):
        with pytest.raises(CLIError, match="--bucket-cap-mb must be a finite number of MiB"):
            RecordConfig(bucket_cap_mb=bad, bucket_cap_mb_list=[1]).validate()
