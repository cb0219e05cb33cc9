"""The ddpsim trace's data classes; import them from ``ddpsim.trace`` (with the reader).

The format, its units and its clock are described in ``ddpsim/trace/__init__.py`` and,
field by field, in ``docs/trace-format.md``.
"""
from __future__ import annotations

import bisect
from dataclasses import asdict, dataclass, field

FORMAT = "ddpsim-trace"
VERSION = 1
SOURCES = ("real", "simulated")
CARRIED = "ddpsimTrace"  # the key under which a Chrome-trace export carries its trace (Note [An export carries its trace])


class TraceFormatError(ValueError):
    """A trace file that cannot be read: truncated, garbled, the wrong version, or a value out of range."""




@dataclass
class Param:
    """One model parameter, as DDP's reducer sees it."""

    index: int | None  # DDP's parameter index (None: frozen, so not in the reducer)
    name: str
    shape: list[int]
    dtype: str
    bytes: int
    requires_grad: bool = True


@dataclass
class Bucket:
    """One gradient bucket in a layout."""

    index: int  # bucket index; allreduces launch in this order
    params: list[int]  # DDP parameter indices, in the bucket's internal order
    bytes: int
    cap_bytes: int | None = None  # the size limit the bucket was built under


@dataclass
class Layout:
    """A bucket layout and the first iteration it was in effect."""

    from_iteration: int
    kind: str  # "construction" or "rebuilt"
    buckets: list[Bucket]


@dataclass
class Span:
    start_ns: int
    end_ns: int

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


@dataclass
class GradReady:
    """A parameter's gradient became ready (its AccumulateGrad hook fired)."""

    t_ns: int
    param: int
    unused: bool = False  # marked ready by find_unused_parameters, not computed
    cpu_t_ns: int | None = None  # when t_ns is the GPU's (meta.timebase): the host time the hook ran


HOOK_OPS = ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
            "reduce_scatter_tensor", "all_to_all_single")  # the collectives a recorded comm hook may issue


@dataclass
class HookCollective:
    """One collective a comm hook issued for a bucket (``record --comm-hook``)."""

    op: str  # the torch.distributed function: one of HOOK_OPS
    bytes: int  # the tensor this rank contributes (all_reduce: the reduced tensor)
    dtype: str  # its dtype, e.g. "float16"
    group: str  # the process group's name (torch's group_name; "0" is the default group)
    group_size: int  # ranks in that group
    launch_ns: int
    complete_ns: int


HOOK_FIELDS = ("collectives", "compress_ns", "decompress_ns")  # BucketEvent's, written only when present
HOST_FIELDS = ("launch_end_ns", "cpu_launch_ns", "cpu_complete_ns")  # BucketEvent's, written only when present


@dataclass
class BucketEvent:
    """One bucket's reduction in one iteration: ready, launched, complete."""

    bucket: int
    bytes: int
    ready_ns: int
    launch_ns: int
    complete_ns: int
    launch_end_ns: int | None = None  # the launch call returned: its cost on the autograd thread ends
    cpu_launch_ns: int | None = None  # when times are the GPU's (meta.timebase): the host launch time
    cpu_complete_ns: int | None = None  # ... and the host time the completion callback ran
    # with a comm hook (record --comm-hook): launch_ns is the hook's call, complete_ns its future's end
    collectives: list[HookCollective] | None = None  # every collective the hook issued, in launch order
    compress_ns: int | None = None  # the hook's start to its first collective's launch (all of it: none)
    decompress_ns: int | None = None  # the last collective's completion to the hook's future's completion


@dataclass
class Collective:
    """A collective that is not a gradient bucket: the used-parameter bitmap, the buffer broadcast."""

    launch_ns: int
    complete_ns: int
    bytes: int


@dataclass
class Iteration:
    """One forward/backward (a micro-step when no_sync accumulates)."""

    iteration: int
    sync: bool  # False: a no_sync accumulation step, no allreduce
    forward: Span
    backward: Span
    optimizer: Span | None = None
    grad_ready: list[GradReady] = field(default_factory=list)
    buckets: list[BucketEvent] = field(default_factory=list)
    graph_search: Span | None = None  # find_unused_parameters' walk of the graph
    bitmap_allreduce: Collective | None = None
    buffer_broadcast: Collective | None = None  # _sync_buffers at the forward's start (broadcast_buffers)
    # CPU ranks: the CPU time of the thread that called backward(), over the call, ns (Note [The
    # backward's compute alone] in record/instrument.py); None: not measured
    backward_cpu_ns: int | None = None
    # GPU imports: the compute kernels' busy time within the iteration, merged spans in time order (HTA's
    # COMPUTATION kernels: Note [Compute is the GPU's busy kernels] in analysis/metrics.py); None: the
    # compute runs all through its spans (recordings, simulations)
    compute_busy: list[Span] | None = None

    def busy(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The compute's busy time within [lo, hi]: ``compute_busy`` clipped to it, or all of it."""
        if self.compute_busy is None:
            return [(lo, hi)] if hi > lo else []
        busy, out = self.compute_busy, []
        k = bisect.bisect_right(busy, lo, key=lambda b: b.end_ns)  # disjoint and in order: ends ascend
        while k < len(busy) and busy[k].start_ns < hi:
            out.append((max(lo, busy[k].start_ns), min(hi, busy[k].end_ns)))
            k += 1
        return out

    @property
    def end_ns(self) -> int:
        return self.optimizer.end_ns if self.optimizer else self.backward.end_ns

    @property
    def forward_compute_start_ns(self) -> int:
        """The forward's start, after the buffer broadcast it begins with (if recorded inside it)."""
        c = self.buffer_broadcast
        inside = c is not None and self.forward.start_ns <= c.launch_ns <= c.complete_ns <= self.forward.end_ns
        return c.complete_ns if inside else self.forward.start_ns

    @property
    def forward_compute_ns(self) -> int:
        """The forward's own time: its span without the buffer broadcast."""
        return self.forward.end_ns - self.forward_compute_start_ns

    @property
    def backward_compute_end_ns(self) -> int:
        """When the last gradient became ready: the end of backward's compute."""
        return max((g.t_ns for g in self.grad_ready), default=self.backward.end_ns)


@dataclass
class ShadowStep:
    """A joined rank's pass through Join's loop while others still train (``_DDPJoinHook.main_hook``):
    zero-filled copies of the others' bucket allreduces (``_match_all_reduce_for_bwd_pass``)."""

    iteration: int  # the others' iteration it shadows
    start_ns: int
    end_ns: int
    allreduces: list[Collective] = field(default_factory=list)


@dataclass
class JoinRecord:
    """A rank's time in torch's ``Join`` context after its own data ran out (``record --join``)."""

    start_ns: int  # the rank left its training loop (Join's __exit__ began)
    end_ns: int  # every rank had joined and the final model sync ended
    divide_by_initial_world_size: bool = True  # DDP.join's argument (torch's default: True)
    shadows: list[ShadowStep] = field(default_factory=list)


@dataclass
class RankTrace:
    rank: int
    host: str = ""
    pid: int | None = None
    # this rank's clock minus rank 0's (imported profiles: the meta.clock.reference rank's, or its
    # meta.clock.groups entry's reference), already removed; an imported rank placed by its steps
    # also had its meta.clock.placed_ns removed
    clock_offset_ns: int = 0
    complete: bool = True
    error: str | None = None
    layouts: list[Layout] = field(default_factory=list)
    iterations: list[Iteration] = field(default_factory=list)
    ddp_logging_data: dict | None = None  # _get_ddp_logging_data() of torch's DDP or minddp's, verbatim
    join: JoinRecord | None = None  # recorded under ``model.join()`` (uneven inputs)

    def layout_at(self, iteration: int) -> Layout | None:
        """The bucket layout in effect at ``iteration``: the last listed from it or before."""
        return next((layout for layout in reversed(self.layouts) if layout.from_iteration <= iteration), None)

    def iteration(self, iteration: int) -> Iteration | None:
        """This rank's iteration number ``iteration`` (the first so numbered; None if it did not record it), from
        an index of the list, rebuilt as it grows (a search per call made reading a trace quadratic)."""
        its, index = self.iterations, self.__dict__.get("_by_number")
        if index is None or index[0] is not its or index[1] != len(its):  # not a field: never written or compared
            index = self.__dict__["_by_number"] = (its, len(its), {it.iteration: it for it in reversed(its)})
        return index[2].get(iteration)


@dataclass
class Trace:
    source: str  # "real" or "simulated"
    meta: dict
    params: list[Param]
    ranks: list[RankTrace]
    version: int = VERSION

    @property
    def complete(self) -> bool:
        return all(r.complete for r in self.ranks)

    @property
    def imported(self) -> bool:
        """Made by ``ddpsim import`` from PyTorch-profiler traces (``meta.source_format``), not recorded."""
        return "source_format" in self.meta

    @property
    def world_size(self) -> int:
        ws = self.meta.get("world_size")
        return int(ws) if ws is not None else len(self.ranks)

    @property
    def longest_rank(self) -> RankTrace:
        """The rank that recorded the most iterations, the lowest-numbered such: under Join, one that
        trained to the end; in a partial trace (a rank failed, was killed or stopped), one that wrote
        the most before it. Its micro-steps are the run's cycles and its layouts the ones in effect (a
        rank out of data before the rebuild never records the rebuilt layout); the steady state keeps
        the cycles every rank finished where any is left (``unfinished_iterations``)."""
        return max(self.ranks, key=lambda r: len(r.iterations))

    @property
    def shadowed_iterations(self) -> set[int]:
        """The iterations some rank did not train, its data run out, and only shadowed under Join."""
        return {s.iteration for r in self.ranks if r.join is not None for s in r.join.shadows}

    @property
    def unfinished_iterations(self) -> set[int]:
        """The iterations some rank did not record and did not shadow: a partial trace's last ones, or the
        steps of profiles whose windows differ (ranks 0-1 profiled steps 4-5, ranks 2-3 steps 5-6: 4 and 6)."""
        seen = [{it.iteration for it in r.iterations} for r in self.ranks]
        return set().union(*seen) - set.intersection(*seen) - self.shadowed_iterations if seen else set()

    def param_name(self, index: int) -> str:
        for p in self.params:
            if p.index == index:
                return p.name
        return f"param{index}"

    def iteration_on_ranks(self, iteration: int) -> list[Iteration]:
        """Iteration number ``iteration`` of every rank that recorded it, in rank order."""
        return [it for it in (r.iteration(iteration) for r in self.ranks) if it is not None]

    def to_dict(self) -> dict:
        d = asdict(self)
        for r in d["ranks"]:
            if r["join"] is None:  # written only where there is one, like buffer_broadcast below
                del r["join"]
            for it in r["iterations"]:
                for key in ("buffer_broadcast", "backward_cpu_ns", "compute_busy"):  # written only where there is one:
                    if it[key] is None:  # older traces stay as they were
                        del it[key]
                for b in it["buckets"]:  # the comm hook's and the host times, likewise
                    for key in HOOK_FIELDS + HOST_FIELDS:
                        if b[key] is None:
                            del b[key]
                for g in it["grad_ready"]:
                    if g["cpu_t_ns"] is None:  # a host time only where the times are the GPU's
                        del g["cpu_t_ns"]
        d = {"format": FORMAT, **d}
        return d
