"""GPU clusters from the hardware profiles: NVLink inside a node, the node's NICs between nodes, NCCL's
algorithm per bucket, and the 100,000-rank iteration that reconciles with the tree's latency."""
import json

import pytest

from ddpsim.cli import main as cli
from ddpsim.sim import SimConfig, simulate, synthetic
from ddpsim.sim.network import network_for
from ddpsim.sim.stragglers import slowest_factor


def test_profiles_give_two_level_clusters():
    dgx1 = network_for("v100-ib100", 16).cluster
    assert (dgx1.gpus_per_node, dgx1.nics_per_node, dgx1.arch, dgx1.nic_GBps) == (8, 4, "volta", 90 / 8)
    assert network_for("v100-eth25", 64).cluster.nics_per_node == 1  # one NIC per server on Ethernet
    assert not network_for("v100-eth25", 64).cluster.nic_near  # sockets: no LL128 across nodes
    polaris = network_for("polaris-ss11", 8).cluster
    assert (polaris.gpus_per_node, polaris.nics_per_node, polaris.cpu) == (4, 2, "amd")
    assert network_for("h100-nvlink", 8).cluster.nvls and network_for("a100-nvlink", 64).algo == "auto"
    with pytest.raises(ValueError, match="cpugloo is this CPU machine's loopback gloo, not a network between GPUs"):
        network_for("a100-cpugloo", 8)  # it prices a CPU trace's replay, not GPUs
    from ddpsim.app.whatif_widgets import network_names
    assert "cpugloo" in network_names() and "cpugloo" not in network_names(gpu_model=True)  # the What-if page's lists


def run(capsys, *args):
    rc = cli(["simulate", "--arch", "resnet50", *args])
    out, err = capsys.readouterr()
    return rc, (json.loads(out.strip().splitlines()[-1]) if rc == 0 else None), err


def test_100000_ranks_run_trees_and_reconcile_with_tree_latency(capsys):
    rc, s, err = run(capsys, "--hardware", "v100-ib100", "--world-size", "100000")
    assert rc == 0, err
    assert {(b["algo"], b["proto"]) for b in s["nccl"]} == {("tree", "LL128")}
    last = s["nccl"][-1]
    # tree LL128 over 12,500 DGX-1 nodes: 14 + 2 x (7 x 1.25 + log2(12500)=13 x 8.5) us, then the bytes at
    # min(NVLink, 4 NICs / 2) x 0.92 x 120/128 x 1/2 x 0.9 (the tree's size correction)
    bw = min(960 / 8, 4 * 90 / 8 / 2) * 0.92 * 120 / 128 * 0.5 * 0.9 * 1e9
    assert last["allreduce_s"] == pytest.approx((14 + 2 * (7 * 1.25 + 13 * 8.5)) * 1e-6 + last["bytes"] / bw)
    w = synthetic("resnet50", "v100-ib100")
    f = slowest_factor(w.meta["rank_spread"], 100_000)
    buffers = network_for("v100-ib100", 100_000).broadcast_s(w.buffer_bytes, 100_000)  # BatchNorm's, before forward
    # Note [NCCL broadcasts on a ring]: LL's base 6.6 + one network hop 2.7 us, at LL's 20.4 GB/s (Volta, Intel)
    assert w.buffer_bytes == 212_904 and buffers == pytest.approx((6.6 + 2.7) * 1e-6 + 212_904 / 20.4e9)
    expected = ((w.forward_s + w.backward_compute_s) * f + w.pre_backward_s + w.finalize_s + w.step_gap_s
                + w.optimizer_s + last["allreduce_s"] + buffers)  # the last bucket's allreduce: the exposed comm
    assert s["iteration_time_s"] == pytest.approx(expected, rel=1e-6)
    assert s["exposed_comm_s"] == pytest.approx(last["allreduce_s"], rel=1e-6)


def test_the_user_picks_the_algorithm(capsys):
    _, auto, _ = run(capsys, "--hardware", "v100-ib100", "--world-size", "100000")
    rc, ring, _ = run(capsys, "--hardware", "v100-ib100", "--world-size", "100000", "--algo", "ring")
    assert rc == 0 and {b["algo"] for b in ring["nccl"]} == {"ring"}
    assert ring["iteration_time_s"] > 5 * auto["iteration_time_s"]  # 2(k-1) ring steps at 100,000 ranks
    rc, _, err = run(capsys, "--hardware", "a100-ib200", "--world-size", "64", "--algo", "nvls")
    assert rc == 2 and "NCCL runs no nvls allreduce over 64 ranks" in err and len(err.strip().splitlines()) == 1


def test_an_explicit_bandwidth_is_the_flat_ring():
    w = synthetic("resnet50", "a100-ib200")
    _, s = simulate(w, SimConfig(world_size=64, iters=2, bandwidth_gbps=100.0))
    assert s["link"]["cluster"] is None and "nccl" not in s
    assert s["link"]["name"].startswith("flat ring, 100 Gbit/s a rank (given), in place of NCCL on A100")
    _, s = simulate(w, SimConfig(world_size=64, iters=2))
    assert s["link"]["cluster"]["nics_per_node"] == 8 and len(s["nccl"]) == s["n_buckets"]


def test_a_latency_on_a_cluster_is_the_fabrics_and_keeps_nccls_model(capsys):
    """--latency-us alone kept NCCL's nodes out: a flat ring at one NIC a rank, 3.5x the exposed comm at 0 us."""
    w = synthetic("bert-large", "v100-ib100")
    exposed = {}
    for us in (None, 0.0, 8.0, 50.0):
        _, s = simulate(w, SimConfig(world_size=64, iters=3, latency_us=us))
        assert s["link"]["cluster"]["nics_per_node"] == 4 and len(s["nccl"]) == s["n_buckets"]
        exposed[us] = s["exposed_comm_s"]
    assert exposed[0.0] == exposed[None] < exposed[8.0] < exposed[50.0]  # EDR's verbs report 0 us: NCCL's table alone
    assert cli(["simulate", "--arch", "resnet50", "--hardware", "v100-ib100", "--world-size", "64",
                "--bandwidth-gbps", "90"]) == 0  # a flat ring instead, and the output says so
    assert "network: flat ring, 90 Gbit/s a rank (given), in place of NCCL on V100-SXM2 nodes: NVLink x8, " \
           "4 x InfiniBand EDR 100Gb/s per node" in capsys.readouterr().out.splitlines()
