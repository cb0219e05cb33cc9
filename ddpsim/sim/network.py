"""Communication cost models: one :class:`Link` object holds every network property.

Allreduce of ``S`` bytes over ``k`` ranks (alpha = per-message latency in seconds,
B = per-rank link bandwidth in bytes/s):

- ring (NCCL rings, gloo ring): ``2(k-1)·alpha + 2(k-1)/k · S/B``
  (reduce-scatter then allgather, each k-1 steps moving S/k bytes);
- tree (binary-tree reduce then broadcast, pipelined):
  ``2·ceil(log2 k)·alpha + 2·S/B``.

``concurrency`` is how many collectives can be in flight at once: gloo runs
allreduces on 2 ``pt_gloo_runloop`` threads by default, NCCL on one stream (1).
Each of those gets the full bandwidth (the link's cost was priced or learnt with
them in flight); more (a round-robin hook's process groups) share it
(Note [Process groups share the link] in ``platform.py``).
``interference`` is the fractional compute slowdown while a collective is in
flight: 0 on a GPU with its own copy engines, > 0 on a CPU where gloo's threads
compete with autograd for the same cores (seen on a 2-core machine).

``shared_core`` models that competition exactly instead: each rank owns one core
(the recorder pins rank r to CPU r), and gloo's runloop threads of rank r run on
it too. Every in-flight collective is then CPU work on each rank's core, and the
core is shared equally (processor sharing) by the rank's compute and its
in-flight collectives: with compute and one allreduce running, each proceeds at
half speed; with two allreduces (gloo's 2 threads) and compute, at a third.
``allreduce_s`` is then the time a collective takes alone on the core, and
compute times are times alone on the core (``interference`` is not used).

Note [Not all of an allreduce is core work]: on this machine a 4 KiB gloo
allreduce takes ~2 ms of wall time but only ~0.3 ms of the process's CPU time; the
rest is waiting for the peer (wake-ups, the other rank's turn in the ring). Only
the CPU part competes with autograd for the core. So a shared-core Link may carry
a second alpha-beta pair, ``core_alpha_s`` / ``core_bandwidth_Bps``, fitted by
``ddpsim calibrate`` from CPU time (``time.process_time``) instead of wall time:
``core_s`` is the core work of a collective, ``allreduce_s - core_s`` the waiting,
which runs alongside it and costs the core nothing. Without the pair, all of the
allreduce is core work (the model before this Note).

Hardware profiles (``hardware/gpus.json``, ``hardware/networks.json``) describe GPU
nodes and fabrics; :func:`network_for` gives a Link that carries a two-level
``nccl.Cluster`` (NVLink inside a node, the node's NICs between nodes), and such a
Link costs an allreduce with NCCL's own tuning model, algorithm and protocol chosen
by message size, GPUs per node and node count (Note [NCCL's tuning model] in
nccl.py). ``algo`` then picks the algorithm as NCCL_ALGO does ("auto": NCCL's
choice). A Link without a cluster (a recorded gloo run, --bandwidth-gbps) keeps the
flat formulas above.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

from ddpsim.sim import nccl

HARDWARE_DIR = Path(__file__).with_name("hardware")
ALGOS = ("ring", "tree")  # the flat formulas
NCCL_ALGOS = ("auto",) + nccl.ALGOS  # a Link with a cluster: NCCL's choice, or one algorithm


@dataclass(frozen=True)
class Link:
    alpha_s: float = 10e-6  # latency per message step (s)
    bandwidth_Bps: float = 10e9  # per-rank bandwidth (bytes/s)
    concurrency: int = 1  # collectives in flight at once (gloo: 2)
    interference: float = 0.0  # compute slowdown while a collective runs (0.3 = 30% slower)
    algo: str = "ring"
    name: str = "custom"
    shared_core: bool = False  # collectives are CPU work on the rank's one core (processor sharing)
    core_alpha_s: float | None = None  # shared core: CPU seconds per message step (None: all is core work)
    core_bandwidth_Bps: float | None = None  # shared core: bytes/s of CPU work (None: bandwidth_Bps)
    cpus: int = 0  # shared core: ranks pinned round robin to this many cores (0: a core per rank)
    time_slice_s: float = 0.0  # ranks sharing a core take turns this long (s; 0: equal shares at every instant)
    cluster: nccl.Cluster | None = None  # GPU nodes: NCCL's model prices the allreduce (None: the flat formula)
    one_rank: tuple[float, float] | None = None  # (s, s/byte) of a collective at one rank, from a 1-rank
    # recording: the backend's own work, no network (None: 0 s; learn/linkfit.py Note [One rank still pays])

    def __post_init__(self):
        check_positive(self.bandwidth_Bps, "bandwidth")
        if not (isinstance(self.alpha_s, (int, float)) and math.isfinite(self.alpha_s)
                and self.alpha_s >= 0):
            raise ValueError(f"latency must be a finite number >= 0, not {self.alpha_s!r}")
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, not {self.concurrency!r}")
        if not (math.isfinite(self.interference) and self.interference >= 0):
            raise ValueError(f"interference must be a finite number >= 0, not {self.interference!r}")
        if self.core_alpha_s is not None and not (math.isfinite(self.core_alpha_s) and self.core_alpha_s >= 0):
            raise ValueError(f"core latency must be a finite number >= 0, not {self.core_alpha_s!r}")
        if not (math.isfinite(self.time_slice_s) and self.time_slice_s >= 0):
            raise ValueError(f"time slice must be a finite number >= 0 s, not {self.time_slice_s!r}")
        if not isinstance(self.cpus, int) or self.cpus < 0:
            raise ValueError(f"cpus must be an integer >= 0, not {self.cpus!r}")
        if self.core_bandwidth_Bps is not None:
            check_positive(self.core_bandwidth_Bps, "core bandwidth")
        if self.one_rank is not None and (len(self.one_rank) != 2
                                          or not all(math.isfinite(v) and v >= 0 for v in self.one_rank)):
            raise ValueError(f"a one-rank collective's cost must be two finite numbers >= 0 (s, s/byte), "
                             f"not {self.one_rank!r}")
        allowed = NCCL_ALGOS if self.cluster is not None else ALGOS + ("auto",)
        if self.algo not in allowed:
            where = "" if self.cluster is not None else " without a GPU cluster profile (--hardware)"
            raise ValueError(f"algo must be one of {', '.join(allowed)}{where}, not {self.algo!r}")

    def allreduce_s(self, nbytes: int, world_size: int) -> float:
        """Seconds for one allreduce of ``nbytes`` over ``world_size`` ranks."""
        if world_size == 1 and self.one_rank is not None:
            return self.one_rank[0] + self.one_rank[1] * nbytes
        if self.cluster is not None:
            return nccl.allreduce_s(self.cluster, nbytes, world_size, self.algo)
        return _cost(self.algo, self.alpha_s, self.bandwidth_Bps, nbytes, world_size)

    def broadcast_s(self, nbytes: int, world_size: int) -> float:
        """Seconds for one broadcast of ``nbytes`` from one rank to ``world_size`` ranks.

        Note [A broadcast is half an allreduce]: an allreduce is a reduce-scatter and an
        allgather (ring) or a reduce and a broadcast (tree), two halves of equal cost; a
        broadcast is one half: ring ``(k-1)·alpha + (k-1)/k · S/B``, tree
        ``ceil(log2 k)·alpha + S/B``. DDP broadcasts its buffers (KiB to a few MiB), where
        the latency term decides. On GPU nodes NCCL's own model prices it instead (a ring
        only: Note [NCCL broadcasts on a ring] in nccl.py).
        """
        if self.cluster is not None and not (world_size == 1 and self.one_rank is not None):
            return nccl.broadcast(self.cluster, int(nbytes), int(world_size))[1]
        return 0.5 * self.allreduce_s(nbytes, world_size)

    def nccl_choice(self, nbytes: int, world_size: int) -> tuple[str, str] | None:
        """(algorithm, protocol) NCCL runs for this allreduce; None on a flat link."""
        if self.cluster is None:
            return None
        return nccl.choose(self.cluster, int(nbytes), int(world_size), self.algo)[:2]

    def core_s(self, nbytes: int, world_size: int) -> float:
        """Of ``allreduce_s``, the seconds of CPU work on each rank's core (shared core).

        Note [Not all of an allreduce is core work].
        """
        total = self.allreduce_s(nbytes, world_size)
        if self.core_alpha_s is None and self.core_bandwidth_Bps is None:
            return total
        alpha = self.alpha_s if self.core_alpha_s is None else self.core_alpha_s
        bw = self.bandwidth_Bps if self.core_bandwidth_Bps is None else self.core_bandwidth_Bps
        return min(total, _cost(self.algo, alpha, bw, nbytes, world_size))

    def core_demand(self, nbytes: int, world_size: int, ranks: int = 1) -> float:
        """The share of one core a collective uses while it runs alone: the CPU work of
        the ``ranks`` pinned to that core over its duration, at most 1 (Note [Latency-bound
        jobs on a shared core] in core.py)."""
        total = self.allreduce_s(nbytes, world_size)
        return min(1.0, ranks * self.core_s(nbytes, world_size) / total) if total > 0 else 1.0

    def with_(self, **changes) -> "Link":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_fit(cls, intercept_s: float, s_per_byte: float, world_size: int,
                 core_fit: tuple[float, float] | None = None, **kw) -> "Link":
        """Invert the ring formula: a fitted ``t = a + b·bytes`` at ``world_size`` ranks.

        ``core_fit``: the same line fitted through CPU time, for ``core_s``.
        """
        alpha, bw = _ring_inverse(intercept_s, s_per_byte, world_size)
        if core_fit is not None:
            kw["core_alpha_s"], kw["core_bandwidth_Bps"] = _ring_inverse(*core_fit, world_size)
        return cls(alpha_s=alpha, bandwidth_Bps=bw, **kw)


def _cost(algo: str, alpha: float, bw: float, nbytes: int, k: int) -> float:
    if k <= 1:
        return 0.0
    if algo in ("ring", "auto"):  # gloo's allreduce is a ring
        return 2 * (k - 1) * alpha + 2 * (k - 1) / k * nbytes / bw
    return 2 * math.ceil(math.log2(k)) * alpha + 2 * nbytes / bw


def _ring_inverse(intercept_s: float, s_per_byte: float, world_size: int) -> tuple[float, float]:
    """(alpha, bandwidth) of the ring formula that gives ``intercept + s_per_byte·bytes``."""
    k = max(world_size, 2)
    alpha = max(intercept_s, 0.0) / (2 * (k - 1))
    bw = (2 * (k - 1) / k) / s_per_byte if s_per_byte > 0 else 1e15
    return alpha, bw


def check_positive(v, what: str) -> None:
    if (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0):
        raise ValueError(f"{what} must be a positive finite number, not {v!r}")


def gbps_to_Bps(gbps: float) -> float:
    """Gigabits per second (as networks are sold) -> bytes per second."""
    check_positive(gbps, "bandwidth (Gbit/s)")
    return gbps * 1e9 / 8


# --------------------------------------------------------------------------- profiles


@lru_cache(maxsize=None)
def _load(name: str) -> dict:
    raw = json.loads((HARDWARE_DIR / name).read_text())
    return {k: v for k, v in raw.items() if not k.startswith("_")}


def gpus() -> dict:
    return _load("gpus.json")


def networks() -> dict:
    return _load("networks.json")


def gpu_networks() -> list[str]:
    """The networks GPUs can be joined by: all but ``cpu_only`` ones (``cpugloo``, this CPU machine's
    loopback gloo, which prices a CPU trace's replay, not a link between GPUs)."""
    return [n for n, p in networks().items() if not p.get("cpu_only")]


def hardware_names() -> list[str]:
    """``gpu-network`` names accepted by --hardware, e.g. ``a100-nvlink``."""
    return [f"{g}-{n}" for g in gpus() for n in gpu_networks()]


# a GPU's name as torch reports it (torch.cuda.get_device_name) -> the node it comes in (gpus.json):
# the H200's HGX node is the H100's (NVLink 4, NVSwitch, 8 GPUs); Polaris is a site, not a GPU name
NODE_OF_NAME = {"v100": "v100", "a100": "a100", "h100": "h100", "h200": "h100", "b200": "b200"}


def node_named(device_name) -> str | None:
    """The gpus.json node of a GPU named ``device_name`` ("NVIDIA H100 80GB HBM3" -> "h100"), or None
    (a PCIe card has no NVLink switch: the profiles' nodes are SXM ones)."""
    words = str(device_name or "").lower().replace("-", " ").split()
    return None if "pcie" in words else next((NODE_OF_NAME[w] for w in words if w in NODE_OF_NAME), None)


def parse_hardware(spec: str) -> tuple[dict, str]:
    """``'a100-ib200'`` -> (gpu profile, network name)."""
    gpu, _, net = spec.lower().partition("-")
    if gpu in gpus() and net in networks() and net not in gpu_networks():
        raise ValueError(f"hardware {spec!r}: {net} is this CPU machine's loopback gloo, not a network between "
                         f"GPUs; use NETWORK one of {', '.join(gpu_networks())}")
    if gpu not in gpus() or net not in networks():
        raise ValueError(f"unknown hardware {spec!r}: use GPU-NETWORK with GPU one of "
                         f"{', '.join(gpus())} and NETWORK one of {', '.join(gpu_networks())}")
    return gpus()[gpu], net


def link_from_profile(p: dict, name: str) -> Link:
    return Link(alpha_s=p["latency_us"] * 1e-6, bandwidth_Bps=gbps_to_Bps(p["bandwidth_gbps"]),
                concurrency=int(p.get("concurrency", 1)), interference=float(p.get("interference", 0.0)),
                algo=p.get("algo", "ring"), name=name)


def cluster_for(gpu: dict, fabric: dict) -> nccl.Cluster:
    """The two-level cluster of ``gpu``'s nodes joined by ``fabric`` (Note [A node shares its NICs])."""
    return nccl.Cluster(
        gpus_per_node=int(gpu.get("gpus_per_node", 8)), intra_GBps=gpu["nvlink"]["bandwidth_gbps"] / 8,
        nic_GBps=fabric["bandwidth_gbps"] / 8, nics_per_node=int(fabric.get("nics_per_node") or gpu.get("nics_per_node", 1)),
        intra_link="nvlink", arch=gpu.get("arch", "ampere"), cpu=gpu.get("cpu", "intel"), nvls=bool(gpu.get("nvls")),
        net_latency_us=float(fabric.get("nccl_latency_us", 0.0)),
        nic_near=bool(fabric.get("nic_near", gpu.get("nic_near", True))))


def fabric_between_nodes(gpu: dict, net: str) -> str:
    """The network between a GPU model's nodes: ``net``, or for ``nvlink`` (one node's NVLink) the GPU's
    default fabric (gpus.json; ib200 where it names none)."""
    return gpu.get("default_fabric", "ib200") if net == "nvlink" else net


def network_for(spec: str, world_size: int) -> Link:
    """The Link a ``gpu-network`` job of ``world_size`` ranks communicates over.

    NCCL's model on the node of ``gpu`` (gpus.json) joined by the fabric: ``nvlink``
    alone means the GPU's default fabric beyond one node. The flat alpha and
    bandwidth shown with it are NVLink's on one node, one NIC's beyond.
    """
    gpu, net = parse_hardware(spec)
    fabric_name = fabric_between_nodes(gpu, net)
    fabric = networks()[fabric_name]
    cluster = cluster_for(gpu, fabric)
    one_node = world_size <= cluster.gpus_per_node
    flat = link_from_profile(gpu["nvlink"] if one_node else fabric, "")
    name = (f"NCCL on {gpu['name']} nodes: NVLink x{cluster.gpus_per_node}, "
            f"{cluster.nics_per_node} x {fabric.get('name', fabric_name)} per node")
    return replace(flat, cluster=cluster, algo="auto", name=name)
