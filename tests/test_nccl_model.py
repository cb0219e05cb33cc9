"""NCCL's tuning model (ddpsim/sim/nccl.py): its constants, its choice of algorithm and protocol by
message size and node count, and a node's GPUs sharing its NICs."""
import math

import pytest

from ddpsim.sim import nccl
from ddpsim.sim.nccl import Cluster

DGX_A100 = Cluster(gpus_per_node=8, intra_GBps=240.0, nic_GBps=22.5, nics_per_node=8, arch="ampere", cpu="amd")
DGX_H100 = Cluster(gpus_per_node=8, intra_GBps=360.0, nic_GBps=45.0, nics_per_node=8, arch="hopper", nvls=True)


def test_latencies_are_nccls_formulas():
    # one node of 8: ring LL128 = baseLat 14.0 + 2(8-1) steps x NVLink hwLat 1.9 (tuning.cc)
    assert nccl.latency_us(DGX_A100, "ring", "LL128", 8) == pytest.approx(14.0 + 14 * 1.9)
    # 4 nodes of 8, Simple: intra steps pay at least the AMD post overhead 2 us x3, inter steps the net 14 us
    assert nccl.latency_us(DGX_A100, "ring", "Simple", 32) == pytest.approx(8.4 + (62 - 6) * 6.0 + 6 * 14.0)
    # a tree: 2 x ((GPUs per node - 1) x intra + log2(nodes) x inter)
    assert nccl.latency_us(DGX_A100, "tree", "Simple", 8 * 1024) == pytest.approx(8.4 + 2 * (7 * 4.0 + 10 * 14.0))


def test_tree_latency_grows_with_log_nodes_ring_with_ranks():
    tree = [nccl.latency_us(DGX_A100, "tree", "LL", 8 * 2 ** e) for e in range(4, 12)]
    steps = {round(b - a, 9) for a, b in zip(tree, tree[1:])}
    assert steps == {2 * 5.0}  # one more level of the tree: 2 x the network's LL latency
    ring = [nccl.latency_us(DGX_A100, "ring", "LL", 8 * 2 ** e) for e in (4, 5)]
    assert ring[1] - ring[0] > 50 * steps.pop()  # the ring's 2(k-1) steps: 128 more ranks, 256 more steps


def test_nccl_picks_by_size_and_scale():
    assert nccl.choose(DGX_A100, 4096, 16)[1] == "LL"  # tiny: the latency-bound protocol
    assert nccl.choose(DGX_A100, 1 << 30, 16)[:2] == ("ring", "Simple")  # large, two nodes: ring
    assert nccl.choose(DGX_A100, 25 << 20, 8 * 4096)[0] == "tree"  # a bucket on 4096 nodes: the tree's log latency
    assert nccl.choose(DGX_H100, 1 << 30, 8)[:2] == ("nvls", "Simple")  # one Hopper node: NVLink SHARP
    assert nccl.choose(DGX_H100, 1 << 30, 16)[0] == "nvls_tree"  # two nodes: NVLS-tree doubles the network
    assert nccl.choose(DGX_A100, 1 << 20, 1) == ("none", "none", 0.0)


def test_forcing_an_algorithm_and_what_nccl_would_not_run():
    assert nccl.choose(DGX_A100, 25 << 20, 8 * 4096, "ring")[0] == "ring"
    assert nccl.allreduce_s(DGX_A100, 25 << 20, 8 * 4096, "ring") > nccl.allreduce_s(DGX_A100, 25 << 20, 8 * 4096)
    with pytest.raises(ValueError, match="NCCL runs no nvls allreduce over 16 ranks"):
        nccl.choose(DGX_H100, 1 << 20, 16, "nvls")  # NVLS across nodes needs SHARP
    with pytest.raises(ValueError, match="no nvls_tree"):
        nccl.choose(DGX_A100, 1 << 20, 16, "nvls_tree")  # Ampere has no NVLink SHARP
    # what the What-if page offers: exactly the algorithms choose() does not refuse
    for c in (DGX_A100, DGX_H100):
        for k in (2, 8, 16, 1024):
            for algo in ("auto",) + nccl.ALGOS:
                try:
                    nccl.choose(c, 1 << 20, k, algo)
                    ran = True
                except ValueError:
                    ran = False
                assert nccl.runs(c, k, algo) == ran, (c.arch, k, algo)


def test_a_node_shares_its_nics():
    big = 1 << 34
    def ring_busbw(c, k):
        return nccl.busbw_GBps(big, nccl.allreduce_s(c, big, k, "ring"), k)
    # across nodes the ring gets the node's NICs together, whatever the GPUs per node
    assert ring_busbw(DGX_A100, 64) == pytest.approx(8 * 22.5, rel=0.02)
    half = Cluster(**{**DGX_A100.__dict__, "nics_per_node": 4})
    assert ring_busbw(half, 64) == pytest.approx(4 * 22.5, rel=0.02)
    # the tree's inner nodes carry twice the bytes: half the ring beyond two nodes
    tree = nccl.busbw_GBps(big, nccl.allreduce_s(DGX_A100, big, 64, "tree"), 64)
    assert tree == pytest.approx(0.92 * 8 * 22.5 / 2 * 63 / 64, rel=0.02)


def test_ll128_needs_nvlink_and_a_near_nic_before_hopper():
    pcie = Cluster(**{**DGX_A100.__dict__, "intra_link": "pci"})
    far = Cluster(**{**DGX_A100.__dict__, "nic_near": False})
    assert nccl.bus_GBps(pcie, "ring", "LL128", 1) == 0
    assert nccl.bus_GBps(far, "ring", "LL128", 2) == 0 and nccl.bus_GBps(far, "ring", "LL128", 1) > 0
    assert nccl.bus_GBps(Cluster(**{**DGX_H100.__dict__, "nic_near": False}), "ring", "LL128", 2) > 0


def test_busbw_is_nccl_tests_formula_and_bad_clusters_are_refused():
    assert nccl.busbw_GBps(1e9, 1.0, 2) == pytest.approx(1.0)
    assert nccl.busbw_GBps(8e9, 2.0, 8) == pytest.approx(4 * 2 * 7 / 8)
    with pytest.raises(ValueError, match="arch must be one of"):
        Cluster(arch="kepler")
    with pytest.raises(ValueError, match="nics_per_node must be an integer >= 1"):
        Cluster(nics_per_node=0)
    assert math.isinf(nccl.time_us(DGX_A100, "nvls", "Simple", 1 << 20, 8))


def test_a_broadcast_runs_on_a_ring_at_nccls_cost():
    """Note [NCCL broadcasts on a ring]: tuning.cc keeps only the ring for Broadcast, at one hop's latency where
    the channels share the ring, and its bus bandwidth is its algorithm bandwidth (k / nsteps = 1)."""
    # 4 nodes of 8: LL's base 6.6 + the network's ring LL 2.7 us, at LL's cap across nodes on AMD (19.0 GB/s)
    assert nccl.broadcast(DGX_A100, 4096, 32) == ("LL", pytest.approx((6.6 + 2.7 + 4096 / 19.0e3) * 1e-6))
    assert nccl.broadcast(DGX_A100, 4096, 8 * 1024) == nccl.broadcast(DGX_A100, 4096, 32)  # not k hops
    assert nccl.broadcast(DGX_A100, 4096, 8)[1] == pytest.approx((6.6 + 0.6 + 4096 / 87.7e3) * 1e-6)  # NVLink hop
    assert nccl.broadcast(DGX_A100, 1 << 30, 16) == ("Simple", pytest.approx((8.4 + 14.0 + (1 << 30) / 180e3) * 1e-6))
    assert nccl.broadcast(DGX_A100, 4096, 1) == ("none", 0.0)
