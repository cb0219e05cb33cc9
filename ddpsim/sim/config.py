"""``SimConfig``: what to simulate (DDP options, world size, network what-ifs, noise, bounds)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ddpsim.errors import STATIC_GRAPH_NO_SYNC
from ddpsim.kinds import kind_of, kind_text, kinds, shown
from ddpsim.sim import network, stragglers
from ddpsim.sim.budget import DEFAULT_MAX_EVENTS, STRAGGLER_MAX, check_ranges
from ddpsim.sim.comm_hooks import RATES, CommHook
from ddpsim.sim.workload import ORDERS, BucketCapacityConfig


@dataclass
class SimConfig:
    """The DDP options and what-ifs of one simulation (None: keep the workload's)."""

    world_size: int = 8
    iters: int = 6  # synced steps (optimizer steps); micro-steps = iters * no_sync_every
    bucket_cap_mb: float | None = None  # None: torch's default 25 MiB with a 1 MiB first bucket
    # MiB per bucket, the first reduced first, the last repeated (torch 2.13's DDP(bucket_cap_mb_list));
    # replaces bucket_cap_mb; None: not given (torch's default None)
    bucket_cap_mb_list: list[float] | None = None
    first_bucket_cap_mb: float | None = None  # override the first bucket's cap
    find_unused_parameters: bool = False
    static_graph: bool = False
    broadcast_buffers: bool = True  # rank 0's buffers to every rank before each forward; torch default True
    skip_all_reduce_unused_params: bool = False  # no allreduce for a bucket of unused params only; torch default False
    # torch's DDP_SET_LAST_BUCKET_CAP=1: the rebuild gives its first cap to the bucket reduced last
    # (Note [The small bucket last] in ddpsim/buckets.py); torch default off (the variable unset)
    last_bucket_small: bool = False
    order: str | list[int] = "torch"  # torch | reverse | definition | ready | random | [indices]
    no_sync_every: int = 1
    uneven: int = 0  # rank r has uneven * r fewer micro-steps of data (record --uneven; not in torch)
    join: bool = False  # train inside model.join() (torch's Join; sim/join.py); torch default: no Join
    comm_hook: str | None = None  # register_comm_hook what-if (sim/comm_hooks.py); None: DDP's own allreduce
    powersgd_rank: int = 1  # comm_hook powersgd: matrix_approximation_rank; torch default 1
    # comm_hook powersgd: start_powerSGD_iter (synced steps); torch default 1000, and torch refuses <= 1
    # (error feedback), as the CLI and the app do; 0 or 1 here, for experiments, compress from that step
    powersgd_start_iter: int = 1_000
    # what a hook's pieces cost (comm_hooks.RATES: casts s/byte, matmuls s/flop, 2-byte allreduces,
    # latency; a recording's meta.hook_rates); {}: its compute free, 2-byte allreduces half (not in torch)
    hook_rates: dict[str, float] = field(default_factory=dict)
    naive: bool = False  # per-parameter allreduce after backward (no buckets, no overlap)
    overlap: bool = False  # per-parameter allreduce from each gradient's hook (no buckets; OverlapDDP)
    seed: int = 0
    jitter: float = 0.0  # coefficient of variation of per-micro-step compute time
    jitter_mode: str = "sampled"  # sampled: a draw per rank | expected: the slowest rank's mean (sim/stragglers.py)
    stragglers: dict[int, float] = field(default_factory=dict)  # rank -> compute slowdown factor
    backward_scale: dict[int, float] = field(default_factory=dict)  # rank -> multiplier on its backward only (measured)
    # rank -> multiplier on its synced micro-steps' backward only: a noop what-if's compute alone
    # (learn/alone.py); a no_sync micro-step keeps its own compute; {}: none (not in torch)
    synced_backward_scale: dict[int, float] = field(default_factory=dict)
    # rank -> {"forward": [...], "backward": [...], "gap_s": [...]}: its compute multipliers and the seconds
    # before each micro-step, as recorded (learn/noise.py; cycled past the end; empty: none). Not in torch:
    # a replay plays the recorded ranks iteration by iteration (Note [Replay the recorded ranks' speeds]).
    recorded_ranks: dict[int, dict] = field(default_factory=dict)
    bandwidth_gbps: float | None = None
    latency_us: float | None = None
    algo: str | None = None
    # GPU-NETWORK (hardware/*.json): NCCL's model on that node and fabric prices a recorded workload's
    # collectives, its compute stays recorded (learn/hardware.py); None: the workload's own link (not in torch)
    hardware: str | None = None
    concurrency: int | None = None
    interference: float | None = None
    shared_core: bool | None = None  # None: the workload's; an explicit interference turns it off
    max_explicit_ranks: int = 64  # ranks sharing CPU cores, each simulated alone, at most (not in torch)
    sample_ranks: int = 4  # ranks drawn alone beside a group actor, at least (sim/plan.py; not in torch)
    trace_ranks: int = 8  # at most this many non-straggler ranks in the output trace
    max_events: int = DEFAULT_MAX_EVENTS  # refuse simulations estimated to need more model events (not in torch)
    time_limit_s: float | None = None  # stop a simulation running longer than this (seconds); None: no limit

    def validate(self) -> None:
        def integer(v, name, lo):
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, not {v!r}")
        integer(self.world_size, "world size", 1)
        integer(self.iters, "iters", 1)
        integer(self.no_sync_every, "no_sync_every", 1)
        integer(self.max_explicit_ranks, "max_explicit_ranks", 1)
        integer(self.uneven, "uneven", 0)
        integer(self.powersgd_rank, "powersgd_rank", 1)
        integer(self.powersgd_start_iter, "powersgd_start_iter", 0)
        for name, kind in kinds(SimConfig).items():  # the rest of a value's kind; its range below
            if not kind_of(getattr(self, name), kind, finite=False):
                raise ValueError(f"{name} must be {kind_text(kind)}, not {shown(getattr(self, name))}")
        self.hook()
        for key, rate in self.hook_rates.items():
            if key not in RATES or not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate >= 0):
                raise ValueError(f"hook_rates: {key!r} must be one of {', '.join(RATES)}, a number >= 0")
        if self.uneven and not self.join:
            raise ValueError("uneven inputs without join hang (the rank out of data stops joining the "
                             "allreduces): add join, as with model.join()")
        if self.uneven and self.iters * self.no_sync_every - self.uneven * (self.world_size - 1) < 1:
            raise ValueError(f"uneven {self.uneven} leaves rank {self.world_size - 1} without micro-steps")
        if self.uneven and self.world_size > self.max_explicit_ranks:
            raise ValueError(f"uneven inputs play every rank alone: at most {self.max_explicit_ranks} ranks")
        if self.static_graph and self.no_sync_every > 1:  # Note [static_graph's first step must sync]
            raise ValueError(STATIC_GRAPH_NO_SYNC.format(every=self.no_sync_every))
        if self.naive and self.overlap:
            raise ValueError("naive and overlap are two different DDPs: choose one")
        if not isinstance(self.order, (list, tuple)) and self.order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} or a list, not {self.order!r}")
        if not (isinstance(self.jitter, (int, float)) and math.isfinite(self.jitter) and self.jitter >= 0):
            raise ValueError(f"jitter must be a finite number >= 0, not {self.jitter!r}")
        if self.jitter_mode not in stragglers.MODES:
            raise ValueError(f"jitter_mode must be one of {', '.join(stragglers.MODES)}, not {self.jitter_mode!r}")
        if self.hardware is not None:
            network.parse_hardware(self.hardware)  # a ValueError naming the choices
        if self.bandwidth_gbps is not None:
            network.check_positive(self.bandwidth_gbps, "bandwidth (Gbit/s)")
        if self.latency_us is not None and not (math.isfinite(self.latency_us) and self.latency_us >= 0):
            raise ValueError(f"latency must be a finite number of microseconds >= 0, not {self.latency_us!r}")
        for r, rec in self.recorded_ranks.items():
            check_recorded_rank(r, rec, self.world_size)
        for what, factors in (("straggler", self.stragglers), ("backward_scale", self.backward_scale),
                              ("synced_backward_scale", self.synced_backward_scale)):
            for r, fct in factors.items():
                if not (isinstance(r, int) and 0 <= r < self.world_size):
                    raise ValueError(f"{what} rank {r!r} is not in 0..{self.world_size - 1}")
                network.check_positive(fct, f"{what} {r} factor")
                if fct > STRAGGLER_MAX:
                    learnt = "" if what == "straggler" else (  # learnt from a trace's backward times, not given
                        f" (rank {r}'s backward against the other ranks', learnt from the trace: check its "
                        "backward and backward_cpu_ns times)")
                    raise ValueError(f"{what} {r} factor must be at most {STRAGGLER_MAX:g}, not {fct!r}{learnt}")
        check_ranges(self)
        self.bucket_capacity().compute_bucket_size_limits(self.static_graph, self.find_unused_parameters)

    def sampled_ranks(self, explicit: bool = False) -> int:
        """Ranks besides the first drawn one by one beside a group actor (sim/plan.py): ``sample_ranks``,
        and where ranks do not share CPU cores (``explicit``) as many as the output trace keeps."""
        return self.sample_ranks if explicit else max(self.sample_ranks, self.trace_ranks - 1)

    def one_by_one(self, n_ranks: int, explicit: bool = False) -> bool:
        """Whether ``n_ranks`` ranks with drawn speeds are each one actor (else a sample and a group)."""
        return n_ranks <= (self.max_explicit_ranks if explicit else self.sampled_ranks() + 1)

    def bucket_capacity(self) -> BucketCapacityConfig:
        """The caps in bytes (``ddpsim.buckets.BucketCapacityConfig``, torch's rules)."""
        return BucketCapacityConfig.create(self.bucket_cap_mb, self.bucket_cap_mb_list, self.first_bucket_cap_mb)

    def hook(self):
        """The comm hook what-if (``sim/comm_hooks.py``), or None for DDP's own allreduce."""
        if self.comm_hook is None:
            return None
        return CommHook.parse(self.comm_hook, powersgd_rank=self.powersgd_rank,
                              powersgd_start_iter=self.powersgd_start_iter)


ARCH_LIMITS = {"batch": (1, 1_000_000), "tflops": (1e-6, 1e6)}  # --batch (samples per rank), --tflops (TFLOP/s)


RECORDED_KEYS = ("forward", "backward", "gap_s")


def check_recorded_rank(r, rec, world_size: int) -> None:
    """One ``recorded_ranks`` entry: a rank in range, three equally long lists of sane numbers."""
    if not (isinstance(r, int) and 0 <= r < world_size):
        raise ValueError(f"recorded rank {r!r} is not in 0..{world_size - 1}")
    if not isinstance(rec, dict) or sorted(rec) != sorted(RECORDED_KEYS):
        raise ValueError(f"recorded rank {r} must give exactly {', '.join(RECORDED_KEYS)}")
    lengths = {len(rec[k]) if isinstance(rec[k], list) else -1 for k in RECORDED_KEYS}
    if len(lengths) != 1 or lengths == {0} or lengths == {-1}:
        raise ValueError(f"recorded rank {r}: {', '.join(RECORDED_KEYS)} must be lists of one length")
    for k in RECORDED_KEYS:
        lo = 0.0 if k == "gap_s" else 1e-9
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and lo <= x <= STRAGGLER_MAX for x in rec[k]):
            raise ValueError(f"recorded rank {r}: {k} must hold numbers between {lo:g} and {STRAGGLER_MAX:g}")
