"""static_graph with find_unused_parameters: torch 2.13's ``_set_static_graph`` warns that the
graph's unused parameters are found anyway; minddp warns in the same words, on real gloo ranks."""
import warnings

import pytest
import torch
from torch import nn

from distutil import run_ranks


def _warnings(rank, world):
    """The warnings each constructor gave that mention static_graph, per (static_graph, find_unused)."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    out = {}
    for impl, cls in (("torch", torch.nn.parallel.DistributedDataParallel), ("minddp", MinDDP)):
        for static in (False, True):
            for find_unused in (False, True):
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    cls(nn.Linear(2, 2), static_graph=static, find_unused_parameters=find_unused)
                out[impl, static, find_unused] = [[w.category.__name__, str(w.message)] for w in caught
                                                  if "static_graph" in str(w.message)]
    return out


@pytest.mark.slow
def test_minddp_warns_as_torch_when_static_graph_meets_find_unused_parameters():
    for said in run_ranks(_warnings, 2, timeout=120):
        for static in (False, True):
            for find_unused in (False, True):
                assert said["minddp", static, find_unused] == said["torch", static, find_unused]
        assert said["torch", True, True][0][0] == "UserWarning"
        assert said["torch", True, True][0][1].startswith("You passed find_unused_parameters=true")
        assert [said["torch", s, f] for s, f in ((False, False), (False, True), (True, False))] == [[]] * 3
