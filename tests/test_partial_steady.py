"""The steady state of a partial trace (a rank failed, was killed or stopped, and wrote fewer iterations
than another): the cycles every rank recorded, where any is left. The cycles are those of the rank that
recorded the most (``Trace.longest_rank``), so a last iteration only the other rank wrote entered the
steady state, its time measured without the rank that did not write it (sample 01 with rank 0's last
iteration cut: steady iterations 1..4, iteration 4 from rank 1 alone)."""
import pytest

from ddpsim.analysis import steady_cycles, summarize
from ddpsim.samples import BUNDLED_DIR
from ddpsim.trace import load_trace


def _cut(name: str, rank: int):
    """Sample ``name`` with rank ``rank``'s last iteration not written, as a rank stopped before it wrote it."""
    trace = load_trace(BUNDLED_DIR / f"{name}.json")
    r = trace.ranks[rank]
    r.iterations, r.complete = r.iterations[:-1], False
    return trace


@pytest.mark.parametrize("rank", [0, 1])
def test_the_steady_state_of_a_partial_trace_is_the_iterations_every_rank_recorded(rank):
    whole = load_trace(BUNDLED_DIR / "01_mlp_torch_default.json")
    assert summarize(whole)["steady_iterations"] == [1, 2, 3, 4]
    trace = _cut("01_mlp_torch_default", rank)
    assert summarize(trace)["steady_iterations"] == [1, 2, 3]
    assert steady_cycles(trace, shadowed=True) == [[1], [2], [3]]
    assert trace.longest_rank.rank == 1 - rank and trace.unfinished_iterations == {4}


def test_where_no_cycle_every_rank_recorded_is_left_the_last_cycle_stays():
    """Sample 05 (no_sync every 3) has two cycles: cut a rank's last micro-step, and the steady cycle
    [3, 4, 5] is all there is beside iteration 0's (the construction layout's single bucket)."""
    for rank in (0, 1):
        trace = _cut("05_convnet_torch_no_sync3", rank)
        assert steady_cycles(trace) == [[3, 4, 5]] and trace.unfinished_iterations == {5}
