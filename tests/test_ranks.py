"""``ddpsim.ranks.run_ranks``: real gloo ranks, and a failing rank named in one line."""
import pytest

from distutil import RankFailure, run_ranks


def _fails_with_a_long_message(rank, world_size):
    if rank == 1:  # torch's messages can end with frames, not the reason (powerSGD_hook.py, torch 2.11)
        raise ValueError("Expected a cuda device, but got: cpu\n  powerSGD_hook.py(630): decompress")
    import os
    return os.environ["CUDA_VISIBLE_DEVICES"]


@pytest.mark.slow  # real gloo ranks
def test_a_failing_rank_is_named_by_its_exception_and_cpu_ranks_see_no_gpu():
    with pytest.raises(RankFailure) as info:
        run_ranks(_fails_with_a_long_message, 2, timeout=120)
    assert str(info.value) == "rank 1 failed: ValueError: Expected a cuda device, but got: cpu"
    assert "decompress" in info.value.error  # the whole traceback is kept
    assert run_ranks(_fails_with_a_long_message, 1, timeout=120) == [""]
