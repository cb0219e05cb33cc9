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
