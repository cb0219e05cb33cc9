"""minddp checks, as torch's DDP does before its first broadcast, that every rank wraps the same model:
the number of parameters on every rank, their sizes and strides against rank 0's, in torch's words.
minddp used to go on with a rank holding 6 parameters where rank 0 held 4 (its coalesced broadcast
did not fail) and train a model mixed from both."""
import pytest
import torch
import torch.distributed as dist
from torch import nn

from ddpsim import torchcompat
from ddpsim.minddp import DistributedDataParallel
from ddpsim.minddp.verify import verify_params_across_processes
from distutil import run_ranks

CASES = ("same", "count", "shape", "stride", "dtype")


def _params(case: str, rank: int) -> list[torch.Tensor]:
    """Rank 0's parameters, or rank 1's differing from them as ``case`` says."""
    params = [torch.zeros(4, 4), torch.zeros(4)]
    if rank == 1 and case == "count":
        params.append(torch.zeros(2))
    if rank == 1 and case == "shape":
        params[0] = torch.zeros(3, 4)
    if rank == 1 and case == "stride":
        params[0] = torch.zeros(4, 4).t()  # same sizes, strides (1, 4)
    if rank == 1 and case == "dtype":
        params[1] = params[1].double()  # not compared, in torch either
    return params


def _outcome(fn) -> str:
    try:
        fn()
        return "ok"
    except RuntimeError as e:
        return str(e).splitlines()[0]


def verify_rank(rank, world):
    """Each case through torch's check and minddp's, then both DDPs built from differing models."""
    torch.set_num_threads(1)
    out = []
    for case in CASES:
        for check in (torchcompat.verify_param_shape_across_processes, verify_params_across_processes):
            out.append(_outcome(lambda: check(dist.group.WORLD, _params(case, rank))))
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(2 + rank)])  # rank 1: 6 parameters, rank 0: 4
    out.append(_outcome(lambda: torch.nn.parallel.DistributedDataParallel(model)))
    out.append(_outcome(lambda: DistributedDataParallel(model)))
    return out


@pytest.mark.slow
def test_minddp_refuses_differing_models_as_torch_does():
    ranks = run_ranks(verify_rank, 2, timeout=90)
    for rank, out in enumerate(ranks):
        torch_said, minddp_said = out[0::2], out[1::2]
        assert minddp_said == torch_said, (rank, out)
    rank0, rank1 = ranks[0][0::2], ranks[1][0::2]
    cases = dict(zip(CASES, zip(rank0, rank1)))
    assert cases["same"] == cases["dtype"] == ("ok", "ok")
    assert cases["count"] == ("DDP expects same model across all ranks, but Rank 0 has 2 params, while rank 1 has "
                              "inconsistent 3 params.",
                              "DDP expects same model across all ranks, but Rank 1 has 3 params, while rank 0 has "
                              "inconsistent 2 params.")
    assert cases["shape"] == ("ok", "[1]: params[0] in this process with sizes [3, 4] appears not to match sizes of "
                                    "the same param in process 0.")
    assert cases["stride"] == ("ok", "params[0] in this process with sizes [4, 4] appears not to match strides of "
                                     "the same param in process 0.")
    assert ranks[1][-1] == ("DDP expects same model across all ranks, but Rank 1 has 6 params, while rank 0 has "
                            "inconsistent 4 params.")


def subgroup_rank(rank, world):
    """Ranks 1 and 2 in a group of their own (rank 1 its rank 0), rank 2's parameter another shape."""
    torch.set_num_threads(1)
    group = dist.new_group([1, 2])
    if rank == 0:
        return []
    params = [torch.zeros(4, 4) if rank == 1 else torch.zeros(3, 4)]
    return [_outcome(lambda: check(group, params))
            for check in (torchcompat.verify_param_shape_across_processes, verify_params_across_processes)]


@pytest.mark.slow
def test_a_process_group_compares_with_its_own_rank_0():
    _, first, second = run_ranks(subgroup_rank, 3, timeout=90)
    assert first == ["ok", "ok"]
    assert second == ["[1]: params[0] in this process with sizes [3, 4] appears not to match sizes of the same "
                      "param in process 0."] * 2
