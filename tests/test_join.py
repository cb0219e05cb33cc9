"""Uneven inputs with Join: minddp's ``_DDPJoinHook`` against torch's, on real gloo ranks.

Note [Join] in ddpsim/minddp/join.py. ``ddpsim.experiments.join_equivalence`` trains both DDPs
inside ``model.join()`` with rank r given ``10 - 3 r`` batches; the recorder's and the simulator's
Join are checked below.
"""
import pytest
import torch

from distutil import run_ranks
from torchgates import needs_ddp, torch_and_minddp

from ddpsim.experiments.join_equivalence import CASES, SKEW, STEPS, run_case


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-divide{c[1]}-cap{c[2]}-unused{c[3]}-hook{c[4]}")
def test_minddp_joins_like_torch(case):
    results = run_case(case)
    for rank, (diff, shadows) in enumerate(results):
        assert diff <= 1e-6, f"rank {rank}: minddp differs from torch's DDP by {diff:.2e}"
        assert shadows["torch"] == shadows["minddp"], f"rank {rank}: shadow allreduces {shadows}"
    # the rank with the fewest batches shadowed every bucket of the iterations it missed
    assert results[-1][1]["torch"] > 0 and results[0][1]["torch"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("impl", ["torch", "minddp"])
def test_record_join_has_each_shadow_allreduce_of_the_joined_ranks(record, impl, tmp_path):
    from ddpsim.trace import load_trace, save_trace

    trace = record(model="mlp", world_size=3, iters=6, uneven=2, join=True, impl=impl, bucket_cap_mb=0.05)
    assert trace.complete and trace.meta["options"]["join"] is True
    for r in trace.ranks:
        mine = 6 - 2 * r.rank
        assert [it.iteration for it in r.iterations] == list(range(mine))
        j = r.join
        assert j is not None and j.divide_by_initial_world_size is True
        assert [s.iteration for s in j.shadows] == list(range(mine, 6))  # one per iteration it missed
        assert j.start_ns >= r.iterations[-1].end_ns and j.end_ns >= j.start_ns
        for s in j.shadows:
            layout = r.layout_at(s.iteration)
            assert [c.bytes for c in s.allreduces] == [b.bytes for b in layout.buckets]
            assert j.start_ns <= s.start_ns <= s.end_ns <= j.end_ns
            assert all(s.start_ns <= c.launch_ns <= c.complete_ns <= s.end_ns for c in s.allreduces)
    save_trace(trace, tmp_path / "again.json")  # what ddpsim writes, it reads back
    assert load_trace(tmp_path / "again.json").ranks[2].join == trace.ranks[2].join
    from ddpsim.learn import learn, replay_config  # the replay (`simulate --trace`): learning runs noop steps
    from ddpsim.sim import simulate
    w = learn(trace)
    replay, _ = simulate(w, replay_config(w, trace))
    assert [len(r.join.shadows) for r in replay.ranks] == [len(r.join.shadows) for r in trace.ranks]


def test_join_options_are_checked_in_one_line():
    from ddpsim.errors import CLIError
    from ddpsim.record.config import RecordConfig

    for cfg, words in [(RecordConfig(model="mlp", impl="naive", join=True), "--join needs --impl torch or minddp"),
                       (RecordConfig(model="mlp", divide_by_initial_world_size=False), "add --join")]:
        with pytest.raises(CLIError) as err:
            cfg.validate()
        assert words in str(err.value) and "\n" not in str(err.value)


def _hooked_vs_plain(rank, world, folder):
    """torch's DDP under join(divide_by_initial_world_size=False): plain, and with the recorder's comm
    hook dividing by the ranks that still have data (Note [Join's divisor in the recorder's hook])."""
    from ddpsim import torchcompat
    from ddpsim.events import RankRecorder
    from ddpsim.models import build_workload, call_batch
    from ddpsim.record import instrument

    torch.set_num_threads(1)
    out = {}
    for hooked in (False, True):
        torch.manual_seed(7)
        w = build_workload("mlp")
        ddp = torchcompat.torch_ddp(w.model, True, bucket_cap_mb=0.05)
        if hooked:
            rec = RankRecorder(f"{folder}/rank{rank}.jsonl", rank, {})
            state = instrument.CommHookState(instrument.reducer_params(ddp.module), rec)
            ddp.register_comm_hook(state, instrument.bucket_hook)
        opt = torch.optim.SGD(w.model.parameters(), lr=0.05)
        mine = STEPS - SKEW * rank
        join = ddp.join(divide_by_initial_world_size=False)
        if hooked:  # the joined rank's shadows reach the hook too, recorded as the recorder does
            from types import SimpleNamespace

            from ddpsim.record.joined import _shadowed
            for hook in torchcompat.join_hooks(join):
                hook.main_hook = _shadowed(hook.main_hook, SimpleNamespace(recorder=rec, timer=None), mine)
        with join:
            for step in range(mine):
                if hooked:
                    state.world_size = sum(STEPS - SKEW * r > step for r in range(world))
                    rec.begin_iteration(step, True)
                inputs, target = call_batch(w, step, rank, world, 8)
                opt.zero_grad()
                w.loss(ddp(*inputs), target).backward()
                opt.step()
                if hooked:
                    rec.end_iteration()
        out[hooked] = [p.detach().clone() for p in w.model.parameters()]
    return max((a - b).abs().max().item() for a, b in zip(out[False], out[True]))


@pytest.mark.slow
def test_the_recorders_hook_divides_as_join_does_without_it(tmp_path):
    assert max(run_ranks(_hooked_vs_plain, 3, args=(str(tmp_path),), timeout=300)) <= 1e-6


def test_the_simulator_shadows_every_bucket_of_each_missed_step_and_ends_together():
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic("resnet50")
    even, _ = simulate(w, SimConfig(world_size=4, iters=6, join=True))
    trace, _ = simulate(w, SimConfig(world_size=4, iters=6, uneven=1, join=True))
    n_buckets = len(trace.ranks[0].layouts[-1].buckets)
    ends = {r.join.end_ns for r in trace.ranks}
    assert len(ends) == 1  # the final model sync ends Join on every rank at once
    for r in trace.ranks:
        assert len(r.iterations) == 6 - r.rank
        assert [s.iteration for s in r.join.shadows] == list(range(6 - r.rank, 6))
        assert all(len(s.allreduces) == n_buckets for s in r.join.shadows)
        assert r.join.start_ns >= r.iterations[-1].end_ns
    # a joined rank computes nothing, so nobody waits for it: rank 0's steps are as in the even run
    assert [it.end_ns for it in trace.ranks[0].iterations] == [it.end_ns for it in even.ranks[0].iterations]


@pytest.mark.parametrize("hook", ["noop", "fp16"])
def test_a_joined_rank_runs_the_comm_hook_on_its_zeros(hook):
    # _match_all_reduce_for_bwd_pass calls _run_comm_hook: a joined rank sends what the hook sends (noop:
    # nothing; the simulator used to wait for allreduces noop never launched, and the replay of a --join
    # recording, which learns from noop steps, failed)
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    trace, _ = simulate(synthetic("resnet50"), SimConfig(world_size=3, iters=4, uneven=1, join=True, comm_hook=hook))
    assert len({r.join.end_ns for r in trace.ranks}) == 1 and trace.ranks[2].join.end_ns is not None
    shadows = [s for r in trace.ranks for s in r.join.shadows]
    n = len(trace.ranks[0].layouts[-1].buckets)
    assert len(shadows) == 3 and all(len(s.allreduces) == n for s in shadows)  # each bucket through the hook
    took = [c.complete_ns - c.launch_ns for s in shadows for c in s.allreduces]
    assert all(t == 0 for t in took) if hook == "noop" else all(t > 0 for t in took), (hook, took)


def test_uneven_inputs_without_join_are_refused_by_the_simulator():
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    with pytest.raises(ValueError, match="uneven inputs without join hang"):
        simulate(synthetic("resnet50"), SimConfig(world_size=2, iters=4, uneven=1))


def test_the_timeline_draws_a_joined_ranks_zero_filled_allreduces():
    from ddpsim.sim import SimConfig, simulate
    from ddpsim.sim.archs import synthetic
    from ddpsim.viz.timeline import plot_timeline

    trace, _ = simulate(synthetic("resnet50"), SimConfig(world_size=4, iters=6, uneven=1, join=True))
    gids = {p.get_gid() for p in plot_timeline(trace, 5).axes[0].patches}
    n = len(trace.ranks[0].layouts[-1].buckets)
    assert {f"shadow:r{r}:b{b}" for r in (1, 2, 3) for b in range(n)} <= gids
    assert not any(g and g.startswith("shadow:r0") for g in gids)  # rank 0 still has data at step 5


def test_simulate_says_who_joined_in_one_line(capsys):
    from ddpsim.cli import main as cli

    assert cli(["simulate", "--arch", "resnet50", "--world-size", "3", "--uneven", "2", "--join", "--iters", "6"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Join:"))
    assert line.startswith("Join: rank 1 after micro-step 3, rank 2 after micro-step 1 ran out of data; "), line
    assert cli(["simulate", "--arch", "resnet50", "--world-size", "3", "--uneven", "2"]) != 0  # hangs: refused
    assert "add join" in capsys.readouterr().err


def _joined_with_option(rank, world, option, impls=("torch", "minddp")):
    """torch 2.13's DDP and minddp under ``join()`` with ``option`` on, rank r given 5 - 2r batches:
    {(impl, divide_by_initial_world_size): parameters after the last step}."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from test_batched_grad_copy import TWO_BUCKETS, Net
    from test_skip_unused_buckets import ONE_LINEAR_PER_BUCKET, Three

    torch.set_num_threads(1)
    out = {}
    for impl in impls:
        for divide in (True, False):
            torch.manual_seed(0)
            cls = torch.nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
            if option == "skip_all_reduce_unused_params":  # u's bucket is unused on every rank
                model, width = Three(use_u=0), 4
                ddp = cls(model, bucket_cap_mb=ONE_LINEAR_PER_BUCKET, find_unused_parameters=True,
                          skip_all_reduce_unused_params=True)
            else:
                model, width = Net(use_u=True), 5
                ddp = cls(model, bucket_cap_mb=TWO_BUCKETS, batched_grad_copy=True)
            gen, opt = torch.Generator().manual_seed(rank), torch.optim.SGD(model.parameters(), lr=0.1)
            with ddp.join(divide_by_initial_world_size=divide):
                for _ in range(5 - 2 * rank):
                    opt.zero_grad()
                    ddp(torch.randn(2, width, generator=gen)).square().sum().backward()
                    opt.step()
            out[(impl, divide)] = [p.detach().flatten().tolist() for p in model.parameters()]
    return out


@pytest.mark.slow
@needs_ddp("batched_grad_copy")
def test_batched_grad_copy_joins_like_torch_bit_for_bit():
    results = run_ranks(_joined_with_option, 3, args=("batched_grad_copy",), timeout=300)
    for rank in results:
        for divide in (True, False):
            assert rank[("minddp", divide)] == rank[("torch", divide)], divide
    assert results[0][("torch", True)] != results[0][("torch", False)]


@pytest.mark.slow
@pytest.mark.parametrize("impl", torch_and_minddp("skip_all_reduce_unused_params"))
def test_skipping_unused_buckets_under_join_mismatches_collectives(impl):
    """torch 2.13: a joined rank shadows every bucket (``_match_all_reduce_for_bwd_pass``) while the
    ranks still training skip the unused one, so their next collectives differ in size and gloo
    aborts the process; minddp issues the same collectives and aborts the same way."""
    from distutil import RankFailure
    with pytest.raises(RankFailure) as err:
        run_ranks(_joined_with_option, 3, args=("skip_all_reduce_unused_params", (impl,)), timeout=120)
    assert "SIGABRT" in str(err.value)
