"""``python -m ddpsim import PROFILE... --out run.json``: PyTorch-profiler traces -> a ddpsim trace.

One profile per rank (``export_chrome_trace`` / ``tensorboard_trace_handler`` output, .json or
.json.gz). From each ``ProfilerStep#N`` it recovers one iteration:

- forward: ``DistributedDataParallel.forward`` to the start of the backward, on the GPU when the
  profile has GPU events (Note [GPU completion from a profile] in ``ddpsim.trace.kineto``);
- backward: the autograd engine's ops (``autograd::engine::evaluate_function: ...``);
- gradient ready: the end of each ``torch::autograd::AccumulateGrad`` op, turned into the GPU
  time the gradient was really computed (the CUDA event a ready hook would have recorded);
- bucket allreduces: each ``c10d::allreduce_`` in the backward, sized from ``record_param_comms``
  or its input shape, timed by the GPU work it caused (NCCL kernel, or gloo's device<->host
  copies) and, without GPU work, by the CPU collective (``gloo:all_reduce``);
- optimizer: ``Optimizer.step#...`` to the end of ``Optimizer.zero_grad#...``.

What a profile cannot say is listed in ``meta.import_notes``: parameter names (the profile knows
shapes, not names), DDP's options, and bucket members when the sizes do not add up.
"""
from __future__ import annotations

import re
from pathlib import Path

from ddpsim.trace.kineto import (Op, Profile, collective_bytes, is_bitmap, params_from_ready_shapes, read_profile,
                           tensor_shape)
from ddpsim.trace import FORMAT, VERSION, Trace, TraceFormatError, from_dict

STEP = re.compile(r"^ProfilerStep#(\d+)$")
BACKWARD_OP = "autograd::engine::evaluate_function: "
ACCUMULATE = "torch::autograd::AccumulateGrad"
ALLREDUCE = "c10d::allreduce_"
FINALIZE = "torch.distributed.ddp.reducer::copy_bucket_to_grad"  # reducer.cpp finalize_backward's copy-back
SHARED_CLOCK_S = 600.0  # ranks whose first steps start this close (seconds) share a clock


def _ns(us: float) -> int:
    return int(round(us * 1000))


class RankImport:
    """One rank's profile turned into iterations (times in us on the profile's timeline)."""

    def __init__(self, profile: Profile):
        self.p = profile
        self.gpu = profile.has_gpu
        self.steps = sorted(((int(STEP.match(o.name).group(1)), o) for o in profile.cpu
                             if o.cat == "user_annotation" and STEP.match(o.name)), key=lambda s: s[1].start)
        if not self.steps:
            raise TraceFormatError(f"{profile.name} has no ProfilerStep#N spans: profile with a "
                                   "schedule and call prof.step() every iteration")
        self.ready_shapes: list[tuple] = []  # the first step's AccumulateGrad inputs, in ready order
        self.notes: set[str] = set()

    def _t(self, t_cpu: float) -> float:
        """A CPU-side instant on the clock the trace uses (GPU when there are GPU events)."""
        return self.p.done_by(t_cpu) if self.gpu else t_cpu

    def iteration(self, number: int, step: Op) -> dict | None:
        p = self.p
        fwd = p.named("DistributedDataParallel.forward", within=step)
        bwd = [o for o in p.named(BACKWARD_OP, prefix=True) if step.start <= o.start <= step.end]
        if not fwd or not bwd:
            self.notes.add(f"ProfilerStep#{number} has no DDP forward or no backward: skipped")
            return None
        zero = p.named("Optimizer.zero_grad", within=step, prefix=True)
        bwd_start = min(o.start for o in bwd)
        bwd_end = max(o.end for o in bwd)
        opt = p.named("Optimizer.step", within=step, prefix=True)
        # Note [Backward ends after DDP's finalize]: backward() returns after the reducer's
        # finalize_backward copied every bucket back into the gradients (one copy_bucket_to_grad
        # per parameter on the autograd thread, ~4 ms of CPU for ResNet-50 on the H100 profile),
        # which is when a CUDA event after backward() is recorded; the backward span ends there.
        limit = opt[0].start if opt else step.end
        copies = [o.end for o in p.named(FINALIZE, within=step) if bwd_start <= o.start <= limit]
        cpu_end = max([bwd_end, *copies])
        f0 = p.first_gpu_start_after(fwd[0].start, fwd[0].start) if self.gpu else fwd[0].start
        b0 = self._t(self._forward_end(step, fwd[0], bwd_start))
        grads = [o for o in p.named(ACCUMULATE) if bwd_start <= o.start <= bwd_end]
        ready = [self._t(o.end) for o in grads]
        shapes = [tensor_shape(o) for o in grads]
        if not self.ready_shapes:
            self.ready_shapes = shapes
        elif [s for s, _ in shapes] != [s for s, _ in self.ready_shapes]:
            self.notes.add("the gradient-ready order changed between steps; parameters are "
                           "matched by position in the first step's order")
        buckets, bitmap = self._collectives(step, bwd_start, bwd_end)
        it = {"iteration": number, "sync": bool(buckets), "forward": _span(f0, b0),
              "backward": _span(b0, max(self._t(cpu_end), b0)),
              "grad_ready": [{"t_ns": _ns(t), "k": k, **({"cpu_t_ns": _ns(o.end)} if self.gpu else {})}
                             for k, (t, o) in enumerate(zip(ready, grads))],
              "buckets": buckets, "graph_search": None, "bitmap_allreduce": bitmap, "optimizer": None}
        if opt:
            end = (zero[-1] if zero and zero[-1].start >= opt[0].start else opt[-1]).end
            o0 = max(p.first_gpu_start_after(opt[0].start, opt[0].start) if self.gpu else opt[0].start,
                     self._t(cpu_end))
            it["optimizer"] = _span(o0, max(self._t(end), o0))
        return it

    def _forward_end(self, step: Op, fwd: Op, bwd_start: float) -> float:
        """CPU time ``backward()`` was called: its first op on the step's thread (the
        ``aten::ones_like`` of the seed gradient), else the autograd engine's first op. The
        forward (and loss) end on the GPU when the work queued before it is done."""
        seed = [o for o in self.p.cpu if o.tid == step.tid and o.name == "aten::ones_like"
                and fwd.end <= o.start <= bwd_start]
        return seed[-1].start if seed else bwd_start

    def _collectives(self, step: Op, bwd_start: float, bwd_end: float):
        """Bucket allreduces (launched in the backward) and the used-parameter bitmap, if any."""
        p = self.p
        launches = [o for o in p.named(ALLREDUCE) if bwd_start <= o.start <= bwd_end]
        gloo_runs = [o for o in p.named("gloo:all_reduce") if o.within(step)]
        buckets, bitmap = [], None
        for k, op in enumerate(launches):
            nbytes = collective_bytes(op, p)
            start, end = self._collective_span(op, gloo_runs[k] if len(gloo_runs) == len(launches) else None)
            if nbytes is None:
                self.notes.add("some allreduce sizes are unknown (profile without record_shapes)")
                nbytes = 0
            if is_bitmap(op):
                start, end = (op.start, op.end) if start is None else (start, end)
                bitmap = {"launch_ns": _ns(start), "complete_ns": _ns(end), "bytes": nbytes}
                continue
            buckets.append({"bucket": len(buckets), "bytes": nbytes, "ready_ns": None,
                            "launch_ns": None if start is None else _ns(start),
                            "complete_ns": None if end is None else _ns(end), "cpu_launch_ns": _ns(op.start)})
        return buckets, bitmap

    def _collective_span(self, op: Op, gloo_run: Op | None) -> tuple[float, float]:
        """The GPU work a collective caused (NCCL kernel; gloo's copies), else its CPU span."""
        gpu_ops = self.p.launched_by(op)
        if gloo_run is not None:  # gloo: the copy back to the device is launched from its thread
            gpu_ops += self.p.launched_by(gloo_run)
        if gpu_ops:
            return min(g.start for g in gpu_ops), max(g.end for g in gpu_ops)
        if gloo_run is not None:
            return op.start, max(gloo_run.end, op.end)
        if self.gpu:
            self.notes.add("an allreduce launched no GPU work (NCCL with one rank runs no kernel): "
                           "it is shown with no duration, when its bucket was ready on the GPU; "
                           "to simulate more ranks, give the network (simulate --bandwidth-gbps/--latency-us)")
            return None, None  # placed at its bucket's ready time in finish()
        return op.start, op.end


def _span(a: float, b: float) -> dict:
    return {"start_ns": _ns(a), "end_ns": _ns(b)}


def _layout(params: list[dict], order: list[int], bucket_bytes: list[int]) -> tuple[list[dict], bool]:
    """Bucket members: consecutive parameters in ready order, filled to each bucket's size (the
    rebuilt layout is built in ready order). False when the sizes do not add up."""
    size = {p["index"]: p["bytes"] for p in params}
    out, pos = [], 0
    for b, nbytes in enumerate(bucket_bytes):
        members, total = [], 0
        while pos < len(order) and total < nbytes:
            members.append(order[pos])
            total += size[order[pos]]
            pos += 1
        out.append({"index": b, "params": members, "bytes": nbytes, "cap_bytes": None})
        if total != nbytes:
            return [{"index": i, "params": [], "bytes": n, "cap_bytes": None}
                    for i, n in enumerate(bucket_bytes)], False
    return out, pos == len(order)


def profile_files(paths: list[str | Path]) -> list[Path]:
    """The profiles named, a folder standing for its ``*.json`` / ``*.json.gz`` files (as
    ``tensorboard_trace_handler`` writes one per rank into a log folder)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.name.endswith((".json", ".json.gz")))
            if not found:
                raise TraceFormatError(f"folder {p} holds no .json or .json.gz profiler traces")
            out += found
        else:
            out.append(p)
    return out


def import_profiles(paths: list[str | Path]) -> Trace:
    """Kineto traces (one per rank; a folder stands for its traces) -> a validated ddpsim Trace."""
    paths = profile_files(paths)
    ranks, notes, infos = [], set(), []
    for i, path in enumerate(paths):
        profile = Profile(read_profile(path), name=str(path))
        ranks.append((profile.info.get("rank", i), RankImport(profile)))
        infos.append(profile.info)
    seen = [r for r, _ in ranks]
    if len(set(seen)) != len(seen):
        raise TraceFormatError(f"two profiles claim the same rank: ranks {seen}")
    ranks.sort(key=lambda x: x[0])
    params, rank_dicts = None, []
    for rank, imp in ranks:
        its = [it for n, step in imp.steps if (it := imp.iteration(n, step)) is not None]
        if not its:
            raise TraceFormatError(f"{imp.p.name}: no ProfilerStep holds a DDP forward and backward")
        params = params or params_from_ready_shapes(imp.ready_shapes)
        rank_dicts.append(_finish_rank(rank, its, params, imp, notes))
        notes |= imp.notes
    origin, method = _align(rank_dicts, ranks)
    for r in rank_dicts:
        _shift(r, -origin[r["rank"]])
    return from_dict(_trace_dict(rank_dicts, params, ranks, infos, sorted(notes), method, paths),
                     name="imported profile")


def _finish_rank(rank: int, its: list[dict], params: list[dict], imp: RankImport, notes: set) -> dict:
    n = len(params)
    order = [n - 1 - k for k in range(n)]  # DDP index of the k-th ready gradient
    layouts, buckets = [], []
    for it in its:
        for g in it["grad_ready"]:
            k = g.pop("k")
            g["param"] = order[k] if k < n else n
        it["grad_ready"] = [g for g in it["grad_ready"] if g["param"] < n]
        sizes = [b["bytes"] for b in it["buckets"]]
        if sizes and sizes != [b["bytes"] for b in buckets]:  # a new layout from here (e.g. the rebuild)
            buckets, ok = _layout(params, order, sizes)
            if not ok:
                notes.add("bucket members could not be recovered (allreduce sizes do not add up to "
                          "the parameters in ready order); only their sizes are known")
            kind = "construction" if it["iteration"] == 0 or not layouts else "rebuilt"
            layouts.append({"from_iteration": it["iteration"], "kind": kind, "buckets": buckets})
        _bucket_times(it, buckets, imp.gpu)
    if not layouts:
        layouts = [{"from_iteration": its[0]["iteration"], "kind": "construction", "buckets": []}]
    layouts[0]["from_iteration"] = its[0]["iteration"]
    if layouts[0]["kind"] == "construction" and its[0]["iteration"] > 0:
        layouts[0]["kind"] = "rebuilt"  # profiled after iteration 0: torch had rebuilt by then
    return {"rank": rank, "host": "", "pid": None, "clock_offset_ns": 0, "complete": True, "error": None,
            "layouts": layouts, "iterations": its, "ddp_logging_data": None}


def _bucket_times(it: dict, buckets: list[dict], gpu: bool) -> None:
    """Each bucket's ready time: its last gradient's; a collective without GPU work sits there."""
    ready = {g["param"]: g["t_ns"] for g in it["grad_ready"]}
    for ev, layout_b in zip(it["buckets"], buckets):
        times = [ready[m] for m in layout_b["params"] if m in ready]
        ev["ready_ns"] = max(times) if times else ev["cpu_launch_ns"]
        if ev["launch_ns"] is None:  # no GPU work: a zero-length collective at ready time
            ev["launch_ns"] = ev["complete_ns"] = ev["ready_ns"]
        if not gpu:
            ev.pop("cpu_launch_ns")  # the launch is already on the CPU clock


def _align(rank_dicts: list[dict], ranks) -> tuple[dict, str]:
    """Origins per rank. Profiles of one job usually share a clock (Kineto uses the host's);
    if their first steps are far apart, each rank is aligned at its own first forward."""
    firsts = {r["rank"]: r["iterations"][0]["forward"]["start_ns"] for r in rank_dicts}
    if max(firsts.values()) - min(firsts.values()) < SHARED_CLOCK_S * 1e9:
        return {r: min(firsts.values()) for r in firsts}, "kineto-shared"
    return firsts, "first-forward"


def _shift(rank: dict, delta: int) -> None:
    def move(d):
        for k, v in list(d.items()):
            if k.endswith("_ns") and isinstance(v, int):
                d[k] = v + delta
            elif isinstance(v, dict):
                move(v)
            elif isinstance(v, list):
                for x in v:
                    if isinstance(x, dict):
                        move(x)
    for it in rank["iterations"]:
        move(it)


def _trace_dict(rank_dicts, params, ranks, infos, notes, method, paths) -> dict:
    info = infos[0] if infos else {}
    gpu = any(imp.gpu for _, imp in ranks)
    clock = "gpu" if gpu else "cpu"
    notes = ["parameter names: the profile holds shapes only, so parameters are named param<i> with "
             "index i = n-1-(position in the first step's gradient-ready order)",
             "DDP options (bucket_cap_mb, find_unused_parameters, ...) are not in a profile: unknown",
             *notes]
    devices = ranks[0][1].p.devices
    return {"format": FORMAT, "version": VERSION, "source": "real", "params": params, "ranks": rank_dicts,
            "meta": {"impl": "torch", "model": "imported profile", "backend": info.get("backend", "unknown"),
                     "world_size": int(info.get("world_size", len(rank_dicts))),
                     "options": {k: None for k in ("bucket_cap_mb", "find_unused_parameters", "static_graph",
                                                   "no_sync_every", "batch_size")},
                     "imported_from": [Path(p).name for p in paths], "source_format": "kineto",
                     "placement": {"device": "cuda" if gpu else "cpu"},
                     "gpu": devices[0].get("name") if devices else None,
                     "clock": {"method": method, "skew_ns": 0, "offsets_ns": {}},
                     "timebase": _timebase(clock), "import_notes": notes}}


def _timebase(clock: str) -> dict:
    """Which clock each time is on (docs/trace-format.md, meta.timebase)."""
    what = ("gpu: when the GPU did the work (Kineto's GPU timestamps, on the host timeline)"
            if clock == "gpu" else "cpu: when the host ran the op")
    return {"forward": clock, "backward": clock, "optimizer": clock, "grad_ready": clock,
            "allreduce": clock, "source": "kineto", "note": what}
