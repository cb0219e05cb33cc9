"""NCCL's allreduce (and broadcast) on a cluster of nodes: which algorithm and protocol it runs, and how long
it takes.

Note [NCCL's tuning model]: NCCL estimates the time of every (algorithm, protocol) pair as
``latency + bytes / bandwidth`` and runs the fastest (``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime`` in ``src/graph/tuning.cc``, https://github.com/NVIDIA/nccl, master
5067397, 2026-06-11). This module is that model for allreduce, with NCCL's constants (a broadcast:
Note [NCCL broadcasts on a ring]):

- latencies (microseconds): ``baseLatencies`` and ``hwLatencies`` (NVLink, PCI, network) per
  algorithm and protocol; a ring pays ``(nsteps - nInterSteps)·intraLat + nInterSteps·interLat``
  with ``nsteps = 2(k-1)`` and ``nInterSteps = 2(nodes-1)``, its intra-node steps at least the
  network post overhead (1 us Intel, 2 us AMD, x3 for Simple) once it spans nodes, and a
  "plateau" x1.9 (Volta) or x1.4 for Simple across nodes; a tree pays
  ``2·((k/nodes - 1)·intraLat + log2(nodes)·interLat)``: its latency grows with log(nodes), the
  ring's with k; NVLS ``intraLat``, NVLS-tree ``intraLat + 2·log2(nodes)·interLat``;
- protocols: LL moves half the bytes (ring ``min(llMaxBw, bw/2)``, tree ``min(llMaxBw, bw/3.8)``),
  LL128 x0.92 on a ring and 7/9 (one node) or 120/128 on a tree, and needs NVLink (and before
  Hopper, across nodes, NICs on the GPUs' PCIe switches: ``typeInter <= PATH_PXB``); the tree is
  derated x0.92 for allreduce and by ``treeCorrectionFactor`` per message size; NVLS (NVLink
  SHARP, Hopper and later) reaches ``2 x nvlsEfficiency`` of the link (allreduce pipelines two
  operations) and NVLS-tree doubles the network bandwidth at two nodes;
- bus bandwidth to algorithm bandwidth: ``k / 2(k-1)`` for ring and NVLS, 1/2 for the tree.

What NCCL learns from its topology search (channels x per-channel bandwidth) comes here from the
two-level cluster (Note [A node shares its NICs]), and NCCL's per-channel caps are left out: none
binds on the profiles here (``docs/reproductions.md``). CollNet (SHARP in the switches) and PAT are
not modelled.

Note [A node shares its NICs]: inside a node the GPUs talk over NVLink (or PCIe) at
``intra_GBps`` each; between nodes, all GPUs of a node share its ``nics_per_node`` NICs. A ring
crosses each node boundary once per channel, so its bus bandwidth across nodes is the node's
``nics x nic_GBps`` (capped by NVLink), whatever the GPUs per node; a tree's inner nodes receive
from two children and send to a parent, so beyond two nodes each NIC carries twice the bytes and
the tree gets half of it: measured, ring 390 and tree 195 GB/s busbw on 4-60 nodes of 8 B200 and
8 NDR NICs (``experiments/published_nccl.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

ALGOS = ("ring", "tree", "nvls", "nvls_tree")
PROTOS = ("LL", "LL128", "Simple")
ARCHS = ("volta", "ampere", "hopper", "blackwell")  # NCCL's compute-capability rows
LINKS = ("nvlink", "pci")

# tuning.cc ncclTunerConstantsDefaults, microseconds, (LL, LL128, Simple)
BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)}
HW_LAT = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4), "nvls": (0.0, 0.0, 25.0), "nvls_tree": (0.0, 0.0, 25.0)},
    "pci": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7), "nvls": (0.0, 0.0, 0.0), "nvls_tree": (0.0, 0.0, 0.0)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0), "nvls": (0.0, 0.0, 18.0), "nvls_tree": (0.0, 0.0, 20.9)},
}
# llMaxBws (GB/s): rows Volta/Ampere/Hopper/Blackwell on one node, Intel (row 0) / AMD (row 1) CPUs across
# nodes; columns 1 node, 2 nodes, more
LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
NVLS_EFFICIENCY = {"volta": 0.0, "ampere": 0.0, "hopper": 0.85, "blackwell": 0.74}
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}  # getNetOverhead: a network post, per intra-node ring step
# treeCorrectionFactor[protocol][log2(bytes / 64)], 64 B to 256 MB
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9),
)


@dataclass(frozen=True)
class Cluster:
    """Nodes of ``gpus_per_node`` GPUs, NVLink (or PCIe) inside, ``nics_per_node`` NICs between them."""

    gpus_per_node: int = 8  # GPUs in one node (a DGX: 8)
    intra_GBps: float = 240.0  # one GPU's allreduce bus bandwidth inside a node, GB/s (NVLink or PCIe)
    nic_GBps: float = 22.5  # one NIC's achievable bandwidth, GB/s (HDR InfiniBand x 0.9)
    nics_per_node: int = 8  # NICs a node's GPUs share (a DGX A100: 8)
    intra_link: str = "nvlink"  # nvlink | pci: NCCL's latency row, and LL128 needs NVLink
    arch: str = "ampere"  # volta | ampere | hopper | blackwell: NCCL's LL caps, NVLS, ring plateau
    cpu: str = "intel"  # intel | amd: the network post overhead and the LL cap across nodes
    nvls: bool = False  # NVLink SHARP (an NVSwitch of Hopper or later)
    net_latency_us: float = 0.0  # latency the network plugin reports (IB verbs: 0, NCCL's own table covers it)
    channels: int = 16  # NCCL's channels (comm->nChannels): only in the ring plateau's threshold
    nic_near: bool = True  # NICs under the GPUs' PCIe switches, GPUDirect: NCCL allows LL128 across nodes

    def __post_init__(self):
        for name in ("gpus_per_node", "nics_per_node", "channels"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, not {v!r}")
        for name in ("intra_GBps", "nic_GBps"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 < v < float("inf")):
                raise ValueError(f"{name} must be a positive finite number, not {v!r}")
        for name, allowed in (("intra_link", LINKS), ("arch", ARCHS), ("cpu", tuple(NET_OVERHEAD_US))):
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {getattr(self, name)!r}")

    def shape(self, k: int) -> tuple[int, float]:
        """(nodes, GPUs per node) of ``k`` ranks packed onto nodes."""
        nodes = -(-k // self.gpus_per_node)
        return nodes, k / nodes

    @property
    def net_GBps(self) -> float:
        """A node's bandwidth to the other nodes: its NICs together (Note [A node shares its NICs])."""
        return self.nics_per_node * self.nic_GBps


def log2i(n: int) -> int:
    return max(int(n).bit_length() - 1, 0)


def bus_GBps(c: Cluster, algo: str, proto: str, nodes: int) -> float:
    """NCCL's bus bandwidth of ``algo``/``proto`` (GB/s); 0 where NCCL would not run it."""
    net = c.net_GBps if nodes > 1 else float("inf")
    p = PROTOS.index(proto)
    ll_max = LL_MAX_BW[ARCHS.index(c.arch) if nodes == 1 else int(c.cpu == "amd")][min(nodes, 3) - 1]
    if proto == "LL128" and (c.intra_link != "nvlink" or (nodes > 1 and not c.nic_near and c.arch in ARCHS[:2])):
        return 0.0  # tuning.cc: LL128 needs NVLink inside, and before Hopper a NIC path of PXB or closer
    if algo == "ring":
        bw = min(c.intra_GBps, net)
        return (min(ll_max, bw * 0.5), bw * 0.92, bw)[p]
    if algo == "tree":
        bw = min(c.intra_GBps, net if nodes <= 2 else net / 2) * 0.92
        return (min(bw / 3.8, ll_max), bw * (7 / 9 if nodes == 1 else 120 / 128), bw)[p]
    eff = NVLS_EFFICIENCY[c.arch]
    if not c.nvls or eff == 0 or proto != "Simple" or (algo == "nvls") != (nodes == 1):
        return 0.0  # NVLS: one node (across nodes it needs SHARP); NVLS-tree: several
    bw = 2 * eff * c.intra_GBps * (c.channels - 1) / c.channels
    return bw if algo == "nvls" else min(bw, net * (2 if nodes == 2 else 1))


def latency_us(c: Cluster, algo: str, proto: str, k: int) -> float:
    """NCCL's latency of one allreduce over ``k`` ranks (microseconds)."""
    nodes, ppn = c.shape(k)
    p = PROTOS.index(proto)
    intra = HW_LAT[c.intra_link][algo][p]
    inter = HW_LAT["net"]["tree" if ppn == 1 else algo][p] + c.net_latency_us * (2 if proto == "Simple" else 1)
    base = BASE_LAT[algo][p]
    if algo == "ring":
        if nodes > 1:
            intra = max(intra, NET_OVERHEAD_US[c.cpu] * (3 if proto == "Simple" else 1))
        steps, inter_steps = 2 * (k - 1), 2 * (nodes - 1)
        return base + (steps - inter_steps) * intra + inter_steps * inter
    if algo == "tree":
        return base + 2 * ((ppn - 1) * intra + log2i(nodes) * inter)
    if algo == "nvls":
        return intra + (inter if nodes > 1 else 0.0)
    return base + intra + 2 * log2i(nodes) * inter


def time_us(c: Cluster, algo: str, proto: str, nbytes: int, k: int) -> float:
    """``ncclTopoGetAlgoTime``: microseconds for ``algo``/``proto``, or inf where it does not run."""
    nodes, _ = c.shape(k)
    bw = bus_GBps(c, algo, proto, nodes)
    if bw <= 0:
        return float("inf")
    bw *= 0.5 if algo == "tree" else k / (2 * (k - 1))  # bus bandwidth -> algorithm bandwidth
    size = log2i(nbytes >> 6)
    if algo == "tree" and nbytes >= 64 and size < len(TREE_CORRECTION[0]):
        bw *= TREE_CORRECTION[PROTOS.index(proto)][size]
    lat = latency_us(c, algo, proto, k)
    if algo == "ring" and proto == "Simple" and nodes > 1 and nbytes / (c.channels * k) >= 64:
        lat *= 1.9 if c.arch == "volta" else 1.4  # the ring's plateau
    return lat + nbytes / (1000.0 * bw)


@lru_cache(maxsize=65536)
def choose(c: Cluster, nbytes: int, k: int, algo: str = "auto") -> tuple[str, str, float]:
    """(algorithm, protocol, seconds) NCCL runs for an allreduce of ``nbytes`` over ``k`` ranks.

    ``algo``: "auto" (NCCL's choice, as with NCCL_ALGO unset) or one algorithm (NCCL_ALGO=Ring...).
    """
    if k <= 1:
        return "none", "none", 0.0
    t, a, p = _fastest(c, nbytes, k, algo)
    if t == float("inf"):
        raise ValueError(f"NCCL runs no {algo} allreduce over {k} ranks here "
                         f"({-(-k // c.gpus_per_node)} node(s), {c.arch}, nvls={c.nvls}): choose another NCCL algorithm (--algo)")
    return a, p, t * 1e-6


def runs(c: Cluster, k: int, algo: str) -> bool:
    """Whether NCCL can run ``algo`` (an NCCL_ALGO value, or "auto") for an allreduce over ``k`` ranks here.

    NVLS needs NVLink SHARP in one node, NVLS-tree several such nodes (``bus_GBps``); one rank sends nothing.
    """
    return k <= 1 or _fastest(c, 1 << 20, k, algo)[0] < float("inf")


def _fastest(c: Cluster, nbytes: int, k: int, algo: str) -> tuple[float, str, str]:
    """(microseconds, algorithm, protocol) of the fastest of ``algo``'s candidates (inf: none runs)."""
    algos = ALGOS if algo == "auto" else (algo,)
    return min((time_us(c, a, p, nbytes, k), a, p) for a in algos for p in PROTOS)


def allreduce_s(c: Cluster, nbytes: int, k: int, algo: str = "auto") -> float:
    return choose(c, int(nbytes), int(k), algo)[2]


@lru_cache(maxsize=4096)
def broadcast(c: Cluster, nbytes: int, k: int) -> tuple[str, float]:
    """(protocol, seconds) of NCCL's broadcast of ``nbytes`` from one rank to ``k``.

    Note [NCCL broadcasts on a ring]: ``ncclTopoTuneModel`` skips every algorithm but the ring for
    Broadcast (and Reduce), with ``nsteps = k``, so its algorithm bandwidth is the ring's bus bandwidth
    (ratio ``k / nsteps`` = 1); its latency is the ring's base latency plus one hop (``hwLatencies`` of
    the network across nodes, else of NVLink or PCI) where every channel takes the same ring
    (``sameChannels``), the pipelined chain of a broadcast. The protocol is the fastest; NCCL_ALGO does
    not apply (a ring is the only one). Where the channels differ NCCL's model charges ``nsteps`` hops
    instead, which is not modelled here. DDP's buffers (BatchNorm statistics) go this way before each
    forward (``_sync_buffers``, ``broadcast_buffers``)."""
    if k <= 1:
        return "none", 0.0
    nodes, _ = c.shape(k)
    hw = "net" if nodes > 1 else c.intra_link
    times = []
    for i, proto in enumerate(PROTOS):
        bw = bus_GBps(c, "ring", proto, nodes)
        if bw > 0:
            times.append((BASE_LAT["ring"][i] + HW_LAT[hw]["ring"][i] + nbytes / (1000.0 * bw), proto))
    t, proto = min(times)  # Simple always runs
    return proto, t * 1e-6


def busbw_GBps(nbytes: int, seconds: float, k: int) -> float:
    """nccl-tests' bus bandwidth of an allreduce: ``bytes / time x 2(k-1)/k`` (doc/PERFORMANCE.md)."""
    return nbytes / seconds * 2 * (k - 1) / k / 1e9 if seconds > 0 else 0.0
