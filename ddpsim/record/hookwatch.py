"""Timing a user's comm hook from the outside (``record --comm-hook``): the hook runs unchanged.

``watched_hook`` is what the recorder registers with torch's DDP
(``DistributedDataParallel.register_comm_hook``); it calls the user's hook and notes, per bucket:
the hook's start (``launch_ns``, as for the recorder's own ``bucket_hook``), its return
(``launch_end_ns``), every collective the hook issues, and its future's completion
(``complete_ns``). ``RankRecorder.end_iteration`` then derives ``compress_ns`` and
``decompress_ns`` from them (docs/trace-format.md).

Note [Watching a hook's collectives]: a hook's collectives are plain ``torch.distributed`` calls,
made while the hook runs on the autograd thread, and also later, from its future's ``then``
callbacks on a gloo thread (PowerSGD allreduces P in one and Q in the next). So ``CollectiveWatch``
replaces the collectives in ``torch.distributed`` (and ``distributed_c10d``) and
``torch._C.Future.then`` from the start of each recorded step to its end (by then DDP has waited
for every hook's future), and each replacement records only when the thread it runs on is inside
a hook: ``watched_hook`` marks its thread, and a callback the hook chains with ``then`` is wrapped
to mark whichever thread runs it with the same bucket. Outside a hook (DDP's own broadcasts, the
optimizer, other code) they pass straight through. They are installed only with ``--comm-hook``,
so a recording without one runs exactly as before. A collective is timed from its call to its
work's future completing (a ``then`` callback of the recorder's own, added before the hook adds
any); a call with ``async_op=False`` to its return.
"""
from __future__ import annotations

import threading

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from ddpsim import torchcompat
from ddpsim.events import RankRecorder, now_ns
from ddpsim.record.instrument import OUR_LAUNCH

# collective -> (position, name) of the tensor this rank contributes, and of ``group``
WATCHED = {
    "all_reduce": ((0, "tensor"), (2, "group")), "broadcast": ((0, "tensor"), (2, "group")),
    "reduce": ((0, "tensor"), (3, "group")), "all_gather": ((1, "tensor"), (2, "group")),
    "all_gather_into_tensor": ((1, "input_tensor"), (2, "group")),
    "reduce_scatter_tensor": ((1, "input"), (3, "group")),
    "all_to_all_single": ((1, "input"), (4, "group")),
}


def _arg(args, kwargs, where):
    pos, name = where
    return args[pos] if len(args) > pos else kwargs.get(name)


class CollectiveWatch:
    """The replacements of Note [Watching a hook's collectives]: ``install`` before a recorded step,
    ``remove`` after it (``wrap.TorchProbes.before`` and ``after``)."""

    def __init__(self, profiled: bool = False):
        self.local = threading.local()  # .bucket: the bucket event whose hook this thread runs
        self.profiled = profiled  # wrap each in the recorder's profiler marker (instrument.OUR_LAUNCH)
        self.saved: list[tuple[object, str, object]] = []
        self.torch_then = torchcompat.future_class().then  # torch's own, for the recorder's callbacks

    def current(self):
        return getattr(self.local, "bucket", None)

    def install(self) -> "CollectiveWatch":
        if self.saved:  # already installed
            return self
        for name, (tensor_at, group_at) in WATCHED.items():
            original = getattr(c10d, name)
            watched = self._collective(name, original, tensor_at, group_at)
            for module in (dist, c10d):
                self.saved.append((module, name, getattr(module, name)))
                setattr(module, name, watched)
        self.saved.append((torchcompat.future_class(), "then", self.torch_then))
        torchcompat.future_class().then = self._then(self.torch_then)
        return self

    def remove(self) -> None:
        for owner, name, original in reversed(self.saved):
            setattr(owner, name, original)
        self.saved = []

    def _collective(self, op, original, tensor_at, group_at):
        def collective(*args, **kwargs):
            event, tensor = self.current(), _arg(args, kwargs, tensor_at)
            if event is None or not isinstance(tensor, torch.Tensor):  # not in a hook (or a call torch refuses)
                return original(*args, **kwargs)
            group = _arg(args, kwargs, group_at) or dist.group.WORLD
            row = {"op": op, "bytes": tensor.numel() * tensor.element_size(),
                   "dtype": str(tensor.dtype).replace("torch.", ""),
                   "group": str(getattr(group, "group_name", group)),
                   "group_size": dist.get_world_size(group), "launch_ns": now_ns(), "complete_ns": None}
            event["collectives"].append(row)
            self.local.bucket = None  # a collective that calls another is one collective
            try:
                work = self._marked(original, args, kwargs)
            finally:
                self.local.bucket = event
            if work is None:  # async_op=False: done when the call returns
                row["complete_ns"] = now_ns()
            else:  # runs before the hook's own callbacks, which are added after this returns
                self.torch_then(work.get_future(), lambda _fut: row.__setitem__("complete_ns", now_ns()))
            return work
        collective.__wrapped__ = original
        return collective

    def _marked(self, original, args, kwargs):
        if not self.profiled:
            return original(*args, **kwargs)
        with torch.profiler.record_function(OUR_LAUNCH):
            return original(*args, **kwargs)

    def _then(self, original_then):
        def then(future, callback):
            event = self.current()
            if event is None:
                return original_then(future, callback)

            def in_bucket(fut):  # on the thread that completes ``future``: still this bucket's hook
                before, self.local.bucket = self.current(), event
                try:
                    return callback(fut)
                finally:
                    self.local.bucket = before
            return original_then(future, in_bucket)
        return then


class WatchedHookState:
    """State for ``watched_hook``: the user's hook and its state, the recorder and the watch."""

    def __init__(self, params, recorder: RankRecorder, hook, hook_state, watch: CollectiveWatch):
        self.index = {id(p): i for i, p in enumerate(params)}
        self.recorder, self.hook, self.hook_state, self.watch = recorder, hook, hook_state, watch


def register(cfg, ddp, params, recorder: RankRecorder, profiled: bool) -> CollectiveWatch | None:
    """``cfg.comm_hook`` (record/hooks.py) registered on torch's ``ddp`` inside ``watched_hook``; its
    watch, to install around each recorded step. None, and nothing registered, without a hook."""
    if not cfg.comm_hook:
        return None
    from ddpsim.record.hooks import build_hook
    hook_state, hook = build_hook(cfg.comm_hook, cfg.powersgd_rank, cfg.powersgd_start_iter)
    watch = CollectiveWatch(profiled)
    ddp.register_comm_hook(WatchedHookState(params, recorder, hook, hook_state, watch), watched_hook)
    return watch


# Note [A noop step leaves the ranks apart]: ``noop_hook`` sends nothing, so after its step the
# ranks are as far apart as their speeds took them, where a synced step leaves them together (its
# last allreduce). When several runs take turns in the ranks (``record_many``), the next run's
# first allreduce would wait that gap out and look slow (round-robin:2 on one bucket, the same
# collectives as allreduce, measured up to 50% slower after a noop step). So ``worker.train``
# puts a barrier after a noop step there, outside every recorded span; each rank's own noop
# iteration, the compute-only bound, is unchanged by it. A single noop run has none.


def watched_hook(state, bucket):
    """The user's comm hook, called as DDP would call it, timed (Note [Watching a hook's collectives]).

    Mirrors what DDP's reducer does with a registered hook (``Reducer::run_comm_hook``): call it with
    the bucket, return its future. (No annotations: torch checks a comm hook's annotations.)
    """
    t = now_ns()
    buffer = bucket.buffer()
    params = [state.index[id(p)] for p in bucket.parameters()]
    event = state.recorder.bucket_launch(bucket.index(), params, buffer.numel() * buffer.element_size(), t)
    event["collectives"] = []
    local = state.watch.local
    local.bucket = event
    try:
        future = state.hook(state.hook_state, bucket)
    finally:
        local.bucket = None
    state.recorder.launch_end(event, now_ns())

    def done(fut):  # on the thread that completes the hook's future
        event["complete_ns"] = now_ns()
        return fut.value()
    return state.watch.torch_then(future, done)  # torch's own then: DDP waits for this future
