"""The DDP under study in a recording rank: built with the run's options, and probed where it is torch's.

``wrap_model`` builds torch's DistributedDataParallel or one of ddpsim's own (minddp, naive,
overlap); ``TorchProbes`` puts the recorder's probes on torch's DDP (instrument.py), which cannot
report by itself. ``worker.Run`` uses both for each configuration a rank trains.
"""
from __future__ import annotations

import warnings

from ddpsim import torchcompat
from ddpsim.events import RankRecorder
from ddpsim.record import hookwatch, instrument
from ddpsim.record.config import RecordConfig


def wrap_model(cfg: RecordConfig, model, recorder, device):
    """The DDP implementation under study, built with the run's options."""
    opts = dict(bucket_cap_mb=cfg.bucket_cap_mb, find_unused_parameters=cfg.find_unused_parameters,
                static_graph=cfg.static_graph, gradient_as_bucket_view=cfg.gradient_as_bucket_view)
    # torch 2.13's (torch or minddp only: config.py, caps.py), given to torch only where set (torchcompat.torch_ddp)
    newer = dict(bucket_cap_mb_list=None if cfg.bucket_cap_mb_list is None else list(cfg.bucket_cap_mb_list),
                 skip_all_reduce_unused_params=cfg.skip_all_reduce_unused_params, batched_grad_copy=cfg.batched_grad_copy)
    if cfg.impl == "torch":
        ids = [device.index] if device.type == "cuda" else None
        return torchcompat.torch_ddp(model, cfg.broadcast_buffers, device_ids=ids, **newer, **opts)
    if cfg.impl == "minddp":
        from ddpsim.minddp import DistributedDataParallel
        buffers = {} if cfg.broadcast_buffers else {"broadcast_buffers": False}
        with warnings.catch_warnings():  # the deprecated flag, as torchcompat.torch_ddp passes it to torch
            warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
            return DistributedDataParallel(model, recorder=recorder, bucket_order=cfg.order, **buffers, **newer, **opts)
    if cfg.impl == "overlap":
        from ddpsim.minddp.overlap import OverlapDDP
        return OverlapDDP(model, recorder=recorder, **opts)
    from ddpsim.minddp.naive import NaiveDDP
    return NaiveDDP(model, recorder=recorder, **opts)


class TorchProbes:
    """The probes on torch's DDP (see instrument.py); minddp, naive and overlap report by themselves."""

    def __init__(self, cfg: RecordConfig, ddp, recorder: RankRecorder, timer=None):
        params = instrument.reducer_params(ddp.module)
        self.grads = instrument.GradReadyProbe(params, recorder, timer)
        instrument.time_buffer_broadcasts(ddp, recorder, timer)
        # the graph search and the used-parameter bitmap, read from torch's profiler wherever they can be
        self.profiler = (instrument.InternalsProfiler(len(params)) if cfg.profile_internals
                         and (cfg.find_unused_parameters or cfg.static_graph) else None)
        # the user's hook, timed from the outside (hookwatch.py), or the recorder's own
        self.watch = hookwatch.register(cfg, ddp, params, recorder, self.profiler is not None)
        if self.watch is None:
            state = instrument.CommHookState(params, recorder, profiled=self.profiler is not None, timer=timer)
            ddp.register_comm_hook(state, instrument.bucket_hook)
            self.comm_state = state
        self.layout_caps = instrument.torch_layout_caps(ddp, params)
        self.find_unused = cfg.find_unused_parameters
        self.skips = cfg.skip_all_reduce_unused_params
        self.params = params
        self.ddp, self.rebuilt_seen = ddp, False
        self.members = None  # (rebuilt?, the reducer's buckets): read once per layout (bucket_members)

    def just_rebuilt(self) -> bool:
        """True in the one iteration whose forward rebuilt torch's buckets
        (Note [A rebuild is recorded even when nothing moved] in events.py)."""
        if self.rebuilt_seen or not torchcompat.has_rebuilt_buckets(self.ddp):
            return False
        self.rebuilt_seen = True
        return True

    def before(self, sync: bool) -> None:
        self.grads.reset()
        if self.watch:  # only around a recorded step: DDP has waited for every hook's future by its end
            self.watch.install()
        if self.profiler and sync:
            self.profiler.start()

    def after(self, sync: bool, recorder: RankRecorder) -> None:
        if self.watch:
            self.watch.remove()
        if self.profiler and sync:
            self.profiler.collect(recorder)
        if self.find_unused and sync:
            self.grads.mark_unused()
        if self.skips and sync:
            instrument.record_skipped_buckets(self.bucket_members(), self.params, recorder)

    def bucket_members(self) -> list[list[int]]:
        """The reducer's buckets; read again only after a rebuild (reading them copies every bucket),
        or every time where this torch does not say whether it rebuilt."""
        rebuilt = torchcompat.has_rebuilt_buckets(self.ddp)
        if self.members is None or rebuilt is None or self.members[0] != rebuilt:
            self.members = (rebuilt, torchcompat.bucket_members(self.ddp))
        return self.members[1]
