"""Watching torch's own DistributedDataParallel from the outside.

Three probes, none of which changes what DDP computes:
- a ``register_post_accumulate_grad_hook`` on every parameter: the gradient-ready
  time. It fires just before DDP's own hook on the same AccumulateGrad node
  (checked on torch 2.13: it works alongside DDP's own hook).
- a comm hook that does what DDP's built-in allreduce does (divide by world size,
  allreduce, return the future) and notes the bucket's index, parameters and
  bytes at launch, and the completion time in the future's ``then`` callback,
  which runs on a gloo thread at the real completion time.
- with find_unused_parameters, torch's profiler (CPU events only): the reducer's
  graph search and its used-parameter bitmap allreduce happen inside C++ where no
  Python hook can see them, but both appear as profiler events
  (``torch.distributed.ddp.reducer::search_unused_parameters``, ``c10d::allreduce_``).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ddpsim import torchcompat
from ddpsim.buckets import tensor_bytes
from ddpsim.minddp.construction import build_params_for_reducer
from ddpsim.events import RankRecorder, now_ns

SEARCH_EVENT = "torch.distributed.ddp.reducer::search_unused_parameters"
OUR_LAUNCH = "ddpsim::bucket_launch"


def reducer_params(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    """DDP's parameter list (see ``ddpsim.minddp.construction.build_params_for_reducer``), less the
    names the module's ``_set_params_and_buffers_to_ignore_for_model`` list gives, as torch's Reducer."""
    return build_params_for_reducer(module)[0]


def param_table(module: torch.nn.Module) -> list[dict]:
    """Every parameter (frozen ones too), with its DDP index or None."""
    index = {id(p): i for i, p in enumerate(reducer_params(module))}
    rows, seen = [], set()
    for name, p in module.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        rows.append({"index": index.get(id(p)), "name": name, "shape": list(p.shape),
                     "dtype": str(p.dtype).replace("torch.", ""),
                     "bytes": p.numel() * p.element_size(), "requires_grad": p.requires_grad})
    return rows


# Note [The backward's compute alone]: on a CPU rank the backward's compute shares the rank's core
# with gloo's threads, so its wall time is the compute plus the waits for those threads. The
# autograd engine runs a CPU backward, and every gradient and comm hook, on the thread that called
# ``backward()``; that thread's CPU time (``time.thread_time_ns``) over the call is the backward's
# own work alone (the compute, DDP's hook calls, finalize_backward), without the waits. Measured
# here (``benchmarks/bench_compute_alone.py``: 2 gloo ranks on the 2-core CPU, torch's DDP plain
# and with ``noop_hook`` taking turns step by step, 2026-11-26), mlp / shuffled / transformer at
# cap 0.25 MiB: the plain backward took 16.4 / 47.2 / 29.6 ms of wall time and 10.6 / 24.5 /
# 24.6 ms of that thread's CPU time; the noop backward, with no collective to wait for, 10.6 /
# 23.5 / 24.0 ms of wall time (at torch's default cap the two agree within 2%). Two reads per
# iteration, around the call: reading it per gradient and in every comm hook as well (a system
# call each) made recording fp16 at cap 0.25 MiB 3.5% dearer here, and a hook's host time is no
# measure of its CPU time where ranks share cores. ``backward_cpu_ns`` keeps it
# (docs/trace-format.md), and a noop what-if runs it (learn/alone.py). A GPU rank's thread only
# queues kernels: not measured there.


class GradReadyProbe:
    """Post-accumulate-grad hooks on every reducer parameter: gradient-ready times."""

    def __init__(self, params, recorder: RankRecorder, timer=None):
        self.recorder = recorder
        self.timer = timer  # a gpuclock.GpuTimer on CUDA: the GPU time replaces the hook's CPU time
        self.seen: list[int] = []
        self.handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(params)]
        self.n = len(params)

    def _hook(self, index: int):
        def hook(_param):
            ev = self.recorder.grad_ready(index, now_ns())
            if self.timer is not None:  # Note [Events on the right stream] in gpuclock.py
                self.timer.later(ev, "t_ns", "cpu_t_ns")
            self.seen.append(index)
        return hook

    def mark_unused(self) -> None:
        """Parameters with no gradient this backward were marked ready by DDP at its
        first autograd hook (find_unused_parameters); record them so, with unused=True."""
        if not self.seen:
            return
        got = set(self.seen)
        first = min(g["t_ns"] for g in self.recorder.iteration["grad_ready"])
        for i in range(self.n):
            if i not in got:
                self.recorder.grad_ready(i, first, unused=True)

    def reset(self) -> None:
        self.seen = []

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def time_buffer_broadcasts(ddp, recorder: RankRecorder, timer=None) -> None:
    """Record torch DDP's ``_sync_buffers`` (rank 0's buffers to every rank, at a forward's start)
    as the iteration's ``buffer_broadcast``: host times, or CUDA events on the current stream,
    which waits for the broadcast (Note [Events on the right stream] in gpuclock.py)."""
    def around(sync_buffers):
        event = recorder.buffer_broadcast(now_ns(), 0, tensor_bytes(ddp.modules_buffers))
        if timer is not None:
            timer.later(event, "launch_ns")
        sync_buffers()
        event["complete_ns"] = now_ns()
        if timer is not None:
            timer.later(event, "complete_ns")
    torchcompat.wrap_sync_buffers(ddp, around)


class CommHookState:
    """State for ``bucket_hook``: what DDP's built-in allreduce needs, plus the recorder."""

    def __init__(self, params, recorder: RankRecorder, process_group=None, profiled=False, timer=None):
        self.index = {id(p): i for i, p in enumerate(params)}
        self.recorder = recorder
        self.timer = timer  # gpuclock.GpuTimer on CUDA, else None
        self.group = process_group
        self.world_size = dist.get_world_size(process_group)
        self.profiled = profiled
        self.nccl = dist.get_backend(process_group) == "nccl"  # how completion is timed (gpuclock.py)


def bucket_hook(state, bucket):
    """Built-in allreduce semantics, recorded: divide by world size, allreduce, return the future.

    (No type annotations here: torch checks that a comm hook's annotations are the real
    classes, and ``from __future__ import annotations`` would turn them into strings.)
    """
    t = now_ns()
    buffer = bucket.buffer()
    # Not cached: after the rebuild a new bucket's buffer can reuse the old one's address.
    params = [state.index[id(p)] for p in bucket.parameters()]
    event = state.recorder.bucket_launch(bucket.index(), params, buffer.numel() * buffer.element_size(), t)
    timer = state.timer
    buffer.div_(state.world_size)
    if timer is not None:  # the bucket's gradients, divided, are in its buffer on the GPU
        timer.later(event, "launch_ns", "cpu_launch_ns")
    if state.profiled:
        with torch.profiler.record_function(OUR_LAUNCH):
            work = dist.all_reduce(buffer, group=state.group, async_op=True)
    else:
        work = dist.all_reduce(buffer, group=state.group, async_op=True)

    def done(fut):  # CPU: runs on a gloo thread when the allreduce completes
        event["complete_ns"] = now_ns()
        if timer is not None and not state.nccl:  # gloo, CUDA tensors: on streams that wait for it
            timer.later(event, "complete_ns", "cpu_complete_ns")
        return fut.value()[0]

    if timer is not None and state.nccl:  # Note [Events on the right stream] in gpuclock.py
        timer.after_collective(work, event, "launch_ns", "complete_ns", "cpu_complete_ns")
    future = work.get_future().then(done)
    if timer is None:  # the launch call's cost on the autograd thread (a CPU quantity)
        state.recorder.launch_end(event, now_ns())
    return future


def record_skipped_buckets(members: list[list[int]], params, recorder: RankRecorder) -> None:
    """The buckets torch left without an allreduce this iteration (skip_all_reduce_unused_params:
    its comm hook never saw them), from the reducer's layout ``members`` (``torchcompat.bucket_members``),
    so the recorded layout is whole."""
    seen = {ev["bucket"] for ev in recorder.iteration["buckets"]}
    index = {id(p): i for i, p in enumerate(params)}
    for b, ids in enumerate(members):
        if b not in seen:
            nbytes = tensor_bytes(params[index[i]] for i in ids)
            recorder.bucket_skipped(b, [index[i] for i in ids], nbytes)


def torch_layout_caps(ddp, params):
    """A function giving the caps torch built each bucket under, for RankRecorder.end_iteration.

    Construction: torch's ``_compute_bucket_assignment_by_size`` with the limits
    ``_ddp_init_helper`` uses; rebuilt: the same function over the ready order with
    ``[first_bucket_cap, bucket_cap]``, as ``Reducer::rebuild_buckets`` does. The caps are
    torch's own ``per_bucket_size_limits``; every private read is in ``ddpsim.torchcompat``,
    and a cap it cannot tell is None ("unknown") rather than a guess.
    """
    caps = torchcompat.bucket_caps(ddp)
    seen_first = []

    def layout(observed: list[dict]) -> list[int | None]:
        construction = not seen_first
        seen_first.append(True)
        return torchcompat.layout_caps(caps, params, observed, construction,
                                       bool(getattr(ddp, "static_graph", False)),
                                       bool(getattr(ddp, "find_unused_parameters", False)))

    return layout


class InternalsProfiler:
    """One iteration under torch's profiler: the reducer's graph search and bitmap allreduce.

    Started before the iteration's forward and collected after its step, so its
    start-up and parsing fall outside the recorded spans. Profiler times are
    microseconds on their own base; a marker taken together with ``now_ns()``
    gives the offset.
    """

    def __init__(self, n_params: int):
        self.bitmap_bytes = 4 * n_params  # one int32 per parameter (Reducer::local_used_map_)
        self.prof = None
        self.marks: list[tuple[int, int]] = []

    MARKS = 5  # marker pairs; the narrowest one fixes the clock offset

    def start(self) -> None:
        self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        self.prof.__enter__()
        self.marks = []
        for _ in range(self.MARKS):  # the first marker also pays the profiler's warm-up
            before = now_ns()
            with torch.profiler.record_function("ddpsim::mark"):
                pass
            self.marks.append((before, now_ns()))

    def _offset_ns(self, events) -> float:
        """now_ns - profiler_us * 1000, from the narrowest marker (its midpoints line up)."""
        marks = sorted((e for e in events if e.name == "ddpsim::mark"), key=lambda e: e.time_range.start)
        pairs = sorted(zip(self.marks, marks), key=lambda pm: pm[0][1] - pm[0][0])
        (before, after), mark = pairs[0]
        return (before + after) / 2 - (mark.time_range.start + mark.time_range.end) / 2 * 1000

    def collect(self, recorder: RankRecorder) -> None:
        self.prof.__exit__(None, None, None)
        events = list(self.prof.events())
        offset = self._offset_ns(events)
        to_ns = lambda us: int(us * 1000 + offset)  # noqa: E731
        by_start = lambda e: e.time_range.start  # noqa: E731
        launches = sorted((e for e in events if e.name == "c10d::allreduce_"), key=by_start)
        runs = sorted((e for e in events if e.name.startswith("gloo:all_reduce")), key=by_start)
        # gloo runs collectives in the order they were enqueued: the n-th launch is the n-th run,
        # counted from the end: a run the profiler missed is an early one (seen on torch 2.4.1: the
        # first bucket's run on a gloo thread not yet profiled), and the bitmap is launched last.
        ends = {id(launch): run.time_range.end for launch, run in zip(reversed(launches), reversed(runs))}
        for s in (e for e in events if e.name == SEARCH_EVENT):
            recorder.span("graph_search", to_ns(s.time_range.start), to_ns(s.time_range.end))
        for b in launches:
            if not _has_parent(b, OUR_LAUNCH) and id(b) in ends:
                recorder.bitmap_allreduce(to_ns(b.time_range.start), to_ns(ends[id(b)]), self.bitmap_bytes)
        self.prof = None


def _has_parent(event, name: str) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == name:
            return True
        parent = parent.cpu_parent
    return False
