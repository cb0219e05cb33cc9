"""``skip_all_reduce_unused_params`` (torch 2.13): minddp against torch's DDP on real gloo ranks,
recorded, and replayed by the simulator (Note [Skipping the allreduce of unused buckets] in
ddpsim/minddp/unused_buckets.py)."""
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddpsim.sim import Link, ParamSpec, SimConfig, Workload, simulate
from distutil import run_ranks
from torchgates import lacking, needs_ddp, torch_and_minddp

ONE_LINEAR_PER_BUCKET = 80 / 2**20  # MiB: a Linear(4, 4) is 80 bytes
SKIP = "skip_all_reduce_unused_params"  # torch 2.13's DDP takes it, 2.4's does not


class Three(nn.Module):
    """``a`` and ``c`` used on every rank; ``u`` used in the first ``use_u`` forwards only."""

    def __init__(self, use_u=0):
        super().__init__()
        self.a, self.u, self.c = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.steps, self.use_u = 0, use_u

    def forward(self, x):
        y = self.a(x)
        if self.steps < self.use_u:
            y = y + self.u(x)
        self.steps += 1
        return self.c(y)


def counting_hook(seen, bucket):
    """torch's allreduce_hook, counting the buckets it is called for."""
    seen.append(bucket.index())
    return default_hooks.allreduce_hook(None, bucket)


def new_tensor_hook(state, bucket):
    """An allreduce whose result is a new tensor (not the bucket's buffer)."""
    t = bucket.buffer().clone() / dist.get_world_size()
    return dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0])


def _train(rank, impl, options, use_u=0, hook="count", set_to_none=True, iters=3):
    """Per iteration: the buckets the hook saw, gloo allreduces (torch's profiler), every .grad."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.manual_seed(0)
    model = Three(use_u)
    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    ddp = cls(model, bucket_cap_mb=ONE_LINEAR_PER_BUCKET, **options)
    seen, out = [], []
    ddp.register_comm_hook(seen, counting_hook) if hook == "count" else ddp.register_comm_hook(None, new_tensor_hook)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        try:
            for it in range(iters):
                seen.clear()
                for p in model.parameters():
                    if p.grad is not None and set_to_none:
                        p.grad = None
                    elif p.grad is not None:
                        p.grad.zero_()
                x = torch.arange(8.0).reshape(2, 4) * (rank + 1) + it
                with torch.profiler.record_function(f"iteration {it}"):
                    ddp(x).pow(2).sum().backward()
                out.append([list(seen), None, [None if p.grad is None else p.grad.tolist() for p in model.parameters()]])
        except RuntimeError as e:  # torch: RuntimeError; minddp: its subclass MissingGradientError
            out.append(["error at iteration", it, "Expected to have finished reduction" in str(e)
                        or "before the previous backward was reduced" in str(e)])
        dist.barrier()  # the last allreduce's event ends before the profile does (see below)
    for row, allreduces in zip(out, _allreduces_per_iteration(prof.events(), iters)):
        if row[0] != "error at iteration":
            row[1] = allreduces
    return out


def _allreduces_per_iteration(events, iters):
    """gloo allreduces started in each "iteration N" window, from one profile of the whole run.
    gloo ends an allreduce's profiler event in a callback after its work completes, so an event
    can still be open when backward returns: with one profile per iteration, torch 2.11 counted
    such an event in the next iteration's profile or in none (2.13 did not, here)."""
    by_name = {e.name: e.time_range for e in events if e.name.startswith("iteration ")}
    windows = [w for it in range(iters) if (w := by_name.get(f"iteration {it}"))]
    starts = [e.time_range.start for e in events if e.name.startswith("gloo:all_reduce")]
    return [sum(w.start <= s <= w.end for s in starts) for w in windows]


CASES = {  # name -> (DDP options, _train's keywords)
    "find_unused": (dict(find_unused_parameters=True), {}),
    "find_unused+skip": (dict(find_unused_parameters=True, skip_all_reduce_unused_params=True), {}),
    "static+skip": (dict(static_graph=True, skip_all_reduce_unused_params=True), {}),
    "static": (dict(static_graph=True), {}),
    "find_unused+static+skip": (dict(find_unused_parameters=True, static_graph=True,
                                     skip_all_reduce_unused_params=True), {}),
    # u used in iteration 0 only: a stale future is finalized later (Note [A skipped bucket keeps its last future])
    "stale, view": (dict(find_unused_parameters=True, skip_all_reduce_unused_params=True, gradient_as_bucket_view=True),
                    dict(use_u=1, hook="new", set_to_none=False)),
    "stale": (dict(find_unused_parameters=True, skip_all_reduce_unused_params=True),
              dict(use_u=1, hook="new", set_to_none=False)),
    "neither+skip": (dict(skip_all_reduce_unused_params=True), {}),  # last: it fails at the next forward
}


def _every_case(rank, world):
    return {name: {impl: _train(rank, impl, options, **kw) for impl in ("torch", "minddp")}
            for name, (options, kw) in CASES.items() if not lacking(options)}


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_every_case, 2, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(name, marks=needs_ddp(*options)) for name, (options, _) in CASES.items()])
def test_minddp_reduces_as_torch_bit_for_bit(ranks, case):
    for rank in ranks:
        assert rank[case]["minddp"] == rank[case]["torch"]
    assert ranks[0][case]["torch"][-1][:2] != ["error at iteration", 0]


@pytest.mark.slow
@needs_ddp(SKIP)
def test_what_torch_does_with_an_unused_bucket(ranks):
    on, off = ranks[0]["find_unused+skip"]["torch"], ranks[0]["find_unused"]["torch"]
    assert [it[0] for it in off] == [[0, 1, 2]] * 3 and [it[0] for it in on] == [[0, 2]] * 3  # no hook for u's bucket
    assert [it[1] for it in on] == [it[1] - 1 for it in off]  # one gloo allreduce fewer (the bitmap's stays)
    assert [it[2] for it in on] == [it[2] for it in off] and on[0][2][2] is None  # u keeps no gradient
    static = ranks[0]["static+skip"]["torch"]  # one bucket until the rebuild, then u's bucket (last) is skipped
    assert [it[0] for it in static] == [[0], [0], [0, 1]]
    assert [it[0] for it in ranks[0]["static"]["torch"]][2] == [0, 1, 2]
    stale = ranks[0]["stale, view"]["torch"]  # iteration 0's u.bias gradient comes back into the zeroed .grad
    assert stale[0][2][3] != [0.0] * 4 and stale[1][2][3] == stale[2][2][3] == stale[0][2][3]
    assert ranks[0]["stale"]["torch"][2][2][3] == [0.0] * 4  # without the bucket view: left at zero
    assert ranks[0]["neither+skip"]["torch"][1] == ["error at iteration", 1, True]


def _unused_on_rank_0_only(rank, world, impl):
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.manual_seed(0)
    model = Three(use_u=1 if rank == 1 else 0)
    cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    ddp = cls(model, bucket_cap_mb=ONE_LINEAR_PER_BUCKET, find_unused_parameters=True, **{SKIP: True})
    ddp(torch.ones(2, 4)).sum().backward()
    return "trained"


@pytest.mark.slow
@pytest.mark.parametrize("impl", torch_and_minddp(SKIP))
def test_a_bucket_unused_on_one_rank_only_pairs_mismatched_collectives(impl):
    """Rank 0 skips u's bucket, rank 1 allreduces it: its next allreduce meets rank 0's bitmap, of
    another size, and gloo aborts the process (torch 2.13; minddp issues the same collectives)."""
    from distutil import RankFailure
    with pytest.raises(RankFailure) as err:
        run_ranks(_unused_on_rank_0_only, 2, args=(impl,), timeout=120)
    assert "SIGABRT" in str(err.value)


def _tiny(unused=(1,)):
    """Three 1 MiB parameters, the middle one unused; each gradient 1 s."""
    mib = 1024 * 1024
    return Workload(name="tiny", params=[ParamSpec(i, f"p{i}", mib) for i in range(3)],
                    ready_order=[i for i in (2, 1, 0) if i not in unused], grad_compute_s=[1.0] * (3 - len(unused)),
                    link=Link(alpha_s=0.1, bandwidth_Bps=mib), forward_s=1.0, optimizer_s=0.5, unused=list(unused))


@pytest.mark.parametrize("static", [False, True])
def test_the_simulator_leaves_out_the_allreduce_of_an_unused_bucket(static):
    kw = dict(world_size=2, iters=3, bucket_cap_mb=1, find_unused_parameters=not static, static_graph=static)
    on, s_on = simulate(_tiny(), SimConfig(skip_all_reduce_unused_params=True, **kw))
    off, s_off = simulate(_tiny(), SimConfig(**kw))
    bucket = next(b.index for b in on.ranks[0].layouts[-1].buckets if list(b.params) == [1])
    launched = [[b.bucket for b in it.buckets] for it in on.ranks[0].iterations]
    assert all(bucket not in ids for ids in launched[1 if static else 0:])
    if static:  # static_graph's first step (delay_all_reduce) reduces every bucket
        assert len(launched[0]) == len(on.ranks[0].layouts[0].buckets)
    assert bucket in [b.bucket for b in off.ranks[0].iterations[-1].buckets]
    assert s_on["iteration_time_s"] < s_off["iteration_time_s"]
    assert on.meta["options"]["skip_all_reduce_unused_params"] is True
    assert "skip_all_reduce_unused_params" not in off.meta["options"]


@pytest.mark.slow
@pytest.mark.parametrize("impl", torch_and_minddp(SKIP))
def test_recorded_and_replayed_without_the_skipped_allreduce(record, impl):
    from ddpsim.learn import learn, replay_config
    trace = record(model="tests/unused_models.py:spare_mlp", world_size=2, iters=3, impl=impl, bucket_cap_mb=0.01,
                   find_unused_parameters=True, skip_all_reduce_unused_params=True)
    assert trace.meta["options"]["skip_all_reduce_unused_params"] is True
    layout = [list(b.params) for b in trace.ranks[0].layouts[0].buckets]
    skipped = layout.index([2])  # spare.weight alone in its bucket; spare.bias shares head's
    for rank in trace.ranks:
        assert all([b.bucket for b in it.buckets] == [i for i in range(len(layout)) if i != skipped]
                   for it in rank.iterations)
    w = learn(trace)
    replay, _ = simulate(w, replay_config(w, trace))
    assert all(skipped not in [b.bucket for b in it.buckets] for it in replay.ranks[0].iterations)


def test_a_recording_refuses_the_option_where_it_means_nothing():
    from ddpsim.errors import CLIError
    from ddpsim.record.config import RecordConfig
    with pytest.raises(CLIError) as err:
        RecordConfig(impl="naive", skip_all_reduce_unused_params=True).validate()
    assert "--skip-all-reduce-unused-params needs --impl torch or minddp" in str(err.value)
    assert "\n" not in str(err.value)
