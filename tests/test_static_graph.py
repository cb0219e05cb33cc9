"""static_graph (and find_unused_parameters) as torch runs them, read from torch, and as simulated.

What is read from torch: which iterations searched the autograd graph and allreduced the
used-parameter bitmap (torch's profiler, in the recorder), which iteration first ran on rebuilt
buckets (torch's own ``_has_rebuilt_buckets``) and, in static_graph's first iteration, that every
bucket launched after the backward's last gradient (``Reducer::delay_all_reduce``). The simulator
replaying each run must agree on all four.
"""
import pytest

from ddpsim.learn import learn, replay_config, simulate

CASES = [(model, find_unused, static) for model in ("mlp", "shuffled")
         for find_unused in (False, True) for static in (False, True)]
CASES += [("branchy", True, False)]  # branchy's unused branch changes between iterations: no static_graph


def facts(trace) -> dict:
    """What rank 0 did, iteration by iteration."""
    r = trace.ranks[0]
    its = r.iterations
    rebuilt = [lay.from_iteration for lay in r.layouts if lay.kind == "rebuilt"]
    first = its[0]
    last_grad = max(g.t_ns for g in first.grad_ready if not g.unused)
    return {"search": [it.iteration for it in its if it.graph_search],
            "bitmap": [it.iteration for it in its if it.bitmap_allreduce],
            "rebuilt_from": rebuilt[0] if rebuilt else None,
            "first_all_after_backward": all(b.launch_ns >= last_grad for b in first.buckets)}


@pytest.mark.slow
@pytest.mark.parametrize("model, find_unused, static", CASES)
def test_search_bitmap_rebuild_and_delayed_allreduce_match_torch(record, model, find_unused, static):
    trace = record(model=model, world_size=2, iters=5, find_unused_parameters=find_unused, static_graph=static)
    torch_did = facts(trace)
    if static:  # static_graph: no graph search ever, the bitmap in the first iteration only
        assert torch_did["search"] == [] and torch_did["bitmap"] == [0], torch_did
        assert torch_did["first_all_after_backward"] and torch_did["rebuilt_from"] == 2, torch_did
    elif find_unused:  # every iteration searches, and the buckets are never rebuilt
        assert torch_did["search"] == torch_did["bitmap"] == [0, 1, 2, 3, 4] and torch_did["rebuilt_from"] is None
    else:
        assert torch_did["search"] == torch_did["bitmap"] == [] and torch_did["rebuilt_from"] == 1
    w = learn(trace)
    simulated, _ = simulate(w, replay_config(w, trace))  # the run replayed with its own options
    assert facts(simulated) == torch_did


class _NeverUsed(__import__("torch").nn.Module):
    """Parameters 1-3 never used: static_graph appends them to the rebuilt order, by index."""

    def __init__(self):
        from torch import nn

        super().__init__()
        self.a = nn.Linear(8, 8, bias=False)  # 0: 256 B
        self.u1, self.u2, self.u3 = (nn.Linear(k, k, bias=False) for k in (16, 5, 12))  # 1024, 100, 576 B
        self.d = nn.Linear(8, 1, bias=False)  # 4: 32 B

    def forward(self, x):
        return self.d(self.a(x)).sum()


CAP_MB = 1048 / 2**20  # the used parameters and u1 fill one bucket exactly; u2 and u3 the next


def _torch_rebuilt(rank, world):
    import torch

    from ddpsim import torchcompat

    torch.set_num_threads(1)
    model = _NeverUsed()
    ddp = torchcompat.torch_ddp(model, True, static_graph=True, bucket_cap_mb=CAP_MB)
    for _ in range(4):  # rebuilt at iteration 2's forward; torch logs it from iteration 3's
        ddp(torch.randn(2, 8)).backward()
    d = torchcompat.ddp_logging_data(ddp)
    return [[int(i) for i in b.split()] for b in d["rebuilt_per_bucket_param_indices"].split(", ")]


def test_static_graphs_never_used_parameters_are_rebuilt_in_index_order_as_torch_does():
    """The simulator appended them in reverse ([[4, 0, 3, 2, 1]], one bucket); torch: [[4, 0, 1], [2, 3]]."""
    from distutil import run_ranks
    from ddpsim.sim.config import SimConfig
    from ddpsim.sim.network import Link
    from ddpsim.sim.plan import choose_layouts
    from ddpsim.sim.workload import ParamSpec, Workload

    theirs = run_ranks(_torch_rebuilt, 1, timeout=120)[0]
    sizes = [256, 1024, 100, 576, 32]
    w = Workload("never used", [ParamSpec(i, f"p{i}", b) for i, b in enumerate(sizes)], ready_order=[4, 0],
                 grad_compute_s=[1e-4, 1e-4], link=Link(), unused=[1, 2, 3])
    lays, kinds, _ = choose_layouts(w, SimConfig(world_size=2, static_graph=True, bucket_cap_mb=CAP_MB))
    assert kinds == ["construction", "rebuilt"] and theirs == [[4, 0, 1], [2, 3]]
    assert lays[1][0] == theirs


def _torch_static_graph_starting_under_no_sync(rank, world):
    import torch

    from ddpsim import torchcompat

    torch.set_num_threads(1)
    ddp = torchcompat.torch_ddp(torch.nn.Linear(4, 1), True, static_graph=True)
    try:
        with ddp.no_sync():
            ddp(torch.randn(2, 4)).sum().backward()
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


def test_torch_fails_a_static_graph_run_that_starts_under_no_sync():
    """The fact behind the recorder's and the simulator's refusal (Note [static_graph's first step
    must sync] in ddpsim/errors.py), read from torch itself."""
    from distutil import run_ranks

    said = run_ranks(_torch_static_graph_starting_under_no_sync, 1, timeout=120)[0]
    assert said is not None and "expect_autograd_hooks_" in said, said
