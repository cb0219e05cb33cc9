"""``python -m ddpsim import PROFILE... --out run.json``: PyTorch-profiler traces -> a ddpsim trace.

One profile per rank (``export_chrome_trace`` / ``tensorboard_trace_handler`` output, .json or
.json.gz). From each ``ProfilerStep#N`` it recovers one iteration:

- forward: ``DistributedDataParallel.forward``'s call to the start of the backward, on the GPU when
  the profile has GPU events (Notes [GPU completion from a profile] and [A span starts when its
  call does] in ``ddpsim.trace.kineto``);
- backward: the autograd engine's ops (``autograd::engine::evaluate_function: ...``);
- gradient ready: the end of each ``torch::autograd::AccumulateGrad`` op, turned into the GPU
  time the gradient was really computed (the CUDA event a ready hook would have recorded);
- bucket allreduces: each ``c10d::allreduce_`` in the backward, sized from ``record_param_comms``,
  its input shape or its members (``ddpsim.trace.profile_sizes``: where each size comes from), timed by the GPU work it caused (NCCL kernel, or gloo's device<->host
  copies) and, without GPU work, by the CPU collective (``gloo:all_reduce``);
- optimizer: ``Optimizer.step#...`` to the end of ``Optimizer.zero_grad#...``;
- compute busy: the GPU's compute kernels from the forward to the iteration's end, merged
  (Note [Compute is the GPU's busy kernels] in ``ddpsim.analysis.metrics``).

What a profile cannot say is listed in ``meta.import_notes``: parameter names (the profile knows
shapes, not names), DDP's options, and bucket members when the sizes do not add up.
"""
from __future__ import annotations

import bisect
import re
from contextlib import contextmanager
from pathlib import Path

from ddpsim.trace.kineto import Op, Profile, pair_gloo_runs, read_profile
from ddpsim.trace import CARRIED, Trace, TraceFormatError, from_dict
from ddpsim.trace.profile_job import event, missing_ranks, one_per_rank, profile_files, same_buckets, same_model
from ddpsim.trace.profile_meta import align, trace_dict
from ddpsim.trace.clock_align import END
from ddpsim.trace.reader import MAX_INT
from ddpsim.trace.profile_sizes import (UNKNOWN, bucket_members, bucket_sizes, collective_bytes, is_bitmap, match_model,
                                        params_from_ready_shapes, size_meta, tensor_shape)

STEP = re.compile(r"^ProfilerStep#(\d+)$")
BACKWARD_OP = "autograd::engine::evaluate_function: "
ACCUMULATE = "torch::autograd::AccumulateGrad"
ALLREDUCE = "c10d::allreduce_"
FINALIZE = "torch.distributed.ddp.reducer::copy_bucket_to_grad"  # reducer.cpp finalize_backward's copy-back


def _ns(us: float) -> int:
    return int(round(us * 1000))


class RankImport:
    """One rank's profile turned into iterations (times in us on the profile's timeline)."""

    def __init__(self, profile: Profile):
        self.p = profile
        self.gpu = profile.has_gpu
        with reading(profile.name):
            self.steps = _steps(profile)
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
        bwd = p.starting(BACKWARD_OP, step.start, step.end, prefix=True)
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
        f0 = self._t(fwd[0].start)  # Note [A span starts when its call does]
        b0 = self._t(self._forward_end(step, fwd[0], bwd_start))
        grads = p.starting(ACCUMULATE, bwd_start, bwd_end)
        ready = [self._t(o.end) for o in grads]
        shapes = [tensor_shape(o, p.name) for o in grads]
        if not self.ready_shapes:
            self.ready_shapes = shapes
        elif [s for s, _ in shapes] != [s for s, _ in self.ready_shapes]:
            self.notes.add("the gradient-ready order changed between steps; parameters are "
                           "matched by position in the first step's order")
        buckets, bitmap = self._collectives(step, bwd_start, bwd_end, [o.start for o in grads])
        it = {"iteration": number, "sync": bool(buckets), "forward": _span(f0, b0),
              "backward": _span(b0, max(self._t(cpu_end), b0)),
              "grad_ready": [{"t_ns": _ns(t), "k": k, **({"cpu_t_ns": _ns(o.end)} if self.gpu else {})}
                             for k, (t, o) in enumerate(zip(ready, grads))],
              "buckets": buckets, "graph_search": None, "bitmap_allreduce": bitmap, "optimizer": None}
        if opt:
            end = (zero[-1] if zero and zero[-1].start >= opt[0].start else opt[-1]).end
            o0 = self._t(max(opt[0].start, cpu_end))
            it["optimizer"] = _span(o0, max(self._t(end), o0))
        last = (it["optimizer"] or it["backward"])["end_ns"] / 1000
        it["compute_busy"] = [_span(a, b) for a, b in p.compute_busy(f0, last)] if self.gpu else None
        return it

    def _forward_end(self, step: Op, fwd: Op, bwd_start: float) -> float:
        """CPU time ``backward()`` was called: its first op on the step's thread (the
        ``aten::ones_like`` of the seed gradient), else the autograd engine's first op. The
        forward (and loss) end on the GPU when the work queued before it is done."""
        seed = [o for o in self.p.starting("aten::ones_like", fwd.end, bwd_start) if o.tid == step.tid]
        return seed[-1].start if seed else bwd_start

    def _collectives(self, step: Op, bwd_start: float, bwd_end: float, grad_starts: list[float]):
        """Bucket allreduces (launched in the backward) and the used-parameter bitmap, if any; each
        bucket notes how many gradients were ready before its launch (``layout_by_launch``)."""
        p = self.p
        launches = p.starting(ALLREDUCE, bwd_start, bwd_end)
        runs = pair_gloo_runs(launches, p.named("gloo:all_reduce", within=step))
        buckets, bitmap = [], None
        starts = sorted(grad_starts)  # one sort, then a binary search per launch: linear-log in the profile
        for k, op in enumerate(launches):
            nbytes, source = collective_bytes(op, p)
            run = runs[k]
            start, end = self._collective_span(op, run)
            if is_bitmap(op, p, run):
                start, end = (op.start, op.end) if start is None else (start, end)
                bitmap = {"launch_ns": _ns(start), "complete_ns": _ns(end), "bytes": nbytes or 0}
                continue
            buckets.append({"bucket": len(buckets), "bytes": nbytes, "source": source, "ready_ns": None,
                            "ready_before": bisect.bisect_right(starts, op.start),
                            "launch_ns": None if start is None else _ns(start),
                            "complete_ns": None if end is None else _ns(end), "cpu_launch_ns": _ns(op.start),
                            END: _ns(run.end) if run is not None else None if end is None else _ns(end)})
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
                           "to simulate more ranks, give the network (simulate --hardware GPU-NETWORK such as h100-nvlink)")
            return None, None  # placed at its bucket's ready time in finish()
        return op.start, op.end


def _span(a: float, b: float) -> dict:
    return {"start_ns": _ns(a), "end_ns": _ns(b)}


def import_profiles(paths: list[str | Path], model=None, notes=()) -> Trace:
    """Kineto traces (one per rank; a folder stands for its traces) -> a validated ddpsim Trace.
    ``model``: a ``ddpsim.models.shapes.ModelParams`` (``import --model``), the parameters'
    names and sizes when the profile has no shapes, checked against them when it has. ``notes``:
    what the profiles cannot say about the run (``import --note``), added to ``meta.import_notes``."""
    return import_or_carried(paths, model, notes)[0]


def import_or_carried(paths: list[str | Path], model=None, notes=()) -> tuple[Trace, bool]:
    """``import_profiles``, and whether the trace is the one a ddpsim export carried whole (Note [An
    export carries its trace] in ddpsim.trace.export; ``model`` is not needed for it)."""
    paths = profile_files(paths)
    profiles, carried = [], []
    for path in paths:  # one file's raw JSON at a time: a cluster's profiles are large
        with reading(path):
            data = read_profile(path)
            if isinstance(data.get(CARRIED), dict):
                carried.append((path, data[CARRIED]))
            elif not carried:
                profiles.append(Profile(data, name=str(path)))
            del data
    if carried:
        if len(carried) > 1:
            raise TraceFormatError(f"{carried[0][0]} and {carried[1][0]} each carry a whole ddpsim trace "
                                   "(ddpsim exports): import one of them")
        return from_dict(carried[0][1], name=str(carried[0][0])), True
    trace = _import(profiles, paths, model)
    trace.meta["import_notes"] = [*trace.meta["import_notes"], *map(str, notes)]
    return trace, False


def _import(profiles: list[Profile], paths: list[Path], model) -> Trace:
    """The ranks' profiles read, checked to be one job (``ddpsim.trace.profile_job``), on one clock."""
    ranks = [(profile.info.get("rank", i), RankImport(profile)) for i, profile in enumerate(profiles)]
    one_per_rank([(r, imp.p.name) for r, imp in ranks])
    ranks.sort(key=lambda x: x[0])
    steps = [_iterations(imp) for _, imp in ranks]
    same_model(ranks, find_unused=any(it["bitmap_allreduce"] for its in steps for it in its))
    params, order, params_source = _params(ranks[0][1].ready_shapes, model)
    notes, sources = set(), set()
    rank_dicts = [_finish_rank(rank, its, params, order, imp, notes, sources) for (rank, imp), its in zip(ranks, steps)]
    same_buckets(rank_dicts, [imp.p.name for _, imp in ranks])
    for _, imp in ranks:
        notes |= imp.notes
    clock, said = align(rank_dicts)  # Note [A collective ends at once on every rank] in clock_align
    infos = [imp.p.info for _, imp in ranks]
    notes |= {n for n in (said, missing_ranks(infos, [r for r, _ in ranks])) if n}
    sizes = size_meta(params_source, sources)
    raw = trace_dict(rank_dicts, params, [imp for _, imp in ranks], infos, sorted(notes), clock, paths,
                     sizes, model.spec if model is not None else None)
    more = f" and {len(paths) - 1} more" if len(paths) > 1 else ""  # the net: the reader's checks name the files
    return from_dict(raw, name=f"the trace imported from {paths[0]}{more}")


@contextmanager
def reading(name):
    """Whatever goes wrong while one file is read is a one-line TraceFormatError naming it: each field
    is checked where it is read (``ddpsim.trace.kineto``), and this is the net for what slips through."""
    try:
        yield
    except TraceFormatError:
        raise
    except Exception as e:  # noqa: BLE001 - the file named, in one line
        raise TraceFormatError(f"{name} could not be read: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from e


def _steps(profile: Profile) -> list[tuple[int, Op]]:
    """The profile's ``ProfilerStep#N`` spans as (N, span), in time order; an N past a trace's int64
    iteration numbers is refused, naming the file and the span (its digits are not converted)."""
    out = []
    for o in profile.cpu:  # in start order
        if o.cat == "user_annotation" and (m := STEP.match(o.name)):
            if len(m.group(1)) > 19 or int(m.group(1)) > MAX_INT:
                raise TraceFormatError(f"{profile.name}: {event(o.name, o.start)}: its step number is out of range "
                                       f"(at most {MAX_INT}, a trace's int64 iteration numbers)")
            out.append((int(m.group(1)), o))
    return out


def _iterations(imp: RankImport) -> list[dict]:
    """One rank's iterations, each ProfilerStep that holds a DDP forward and backward."""
    with reading(imp.p.name):
        its = [it for n, step in imp.steps if (it := imp.iteration(n, step)) is not None]
    if not its:
        raise TraceFormatError(f"{imp.p.name}: no ProfilerStep holds a DDP forward and backward" + (
            "; it is a ddpsim export without the trace it carries (another rank's file of --per-rank, or "
            "an older export): import the lowest rank's file of the same export, or export again"
            if imp.p.from_ddpsim else ""))
    return its


def _params(ready_shapes: list[tuple], model) -> tuple[list[dict], list[int], str]:
    """(parameters, the DDP index of the k-th ready gradient, where their sizes came from)."""
    if model is not None:
        return [dict(p) for p in model.params], match_model(model, ready_shapes), "model"
    n = len(ready_shapes)
    known = n > 0 and all(shape is not None for shape, _ in ready_shapes)
    return params_from_ready_shapes(ready_shapes), [n - 1 - k for k in range(n)], \
        ("profile shapes" if known else UNKNOWN)


def _finish_rank(rank: int, its: list[dict], params: list[dict], order: list[int], imp: RankImport,
                 notes: set, sources: set) -> dict:
    n = len(params)
    layouts, members, signature = [], [], None
    for it in its:
        for g in it["grad_ready"]:
            k = g.pop("k")
            g["param"] = order[k] if k < n else n
        it["grad_ready"] = [g for g in it["grad_ready"] if g["param"] < n]
        sig = [(b["bytes"], b["ready_before"]) if b["bytes"] is None else b["bytes"] for b in it["buckets"]]
        new = bool(sig) and sig != signature  # a new layout from here (e.g. the rebuild)
        if new:
            signature, members = sig, bucket_members(params, order, it["buckets"], notes)
        bucket_sizes(it["buckets"], members, params, sources)
        if new:
            kind = "construction" if it["iteration"] == 0 or not layouts else "rebuilt"
            layouts.append({"from_iteration": it["iteration"], "kind": kind, "buckets": [
                {"index": i, "params": m, "bytes": ev["bytes"], "cap_bytes": None}
                for i, (m, ev) in enumerate(zip(members, it["buckets"]))]})
        _bucket_times(it, members, imp.gpu)
    if not layouts:
        layouts = [{"from_iteration": its[0]["iteration"], "kind": "construction", "buckets": []}]
    layouts[0]["from_iteration"] = its[0]["iteration"]
    if layouts[0]["kind"] == "construction" and its[0]["iteration"] > 0:
        layouts[0]["kind"] = "rebuilt"  # profiled after iteration 0: torch had rebuilt by then
    return {"rank": rank, "host": "", "pid": None, "clock_offset_ns": 0, "complete": True, "error": None,
            "layouts": layouts, "iterations": its, "ddp_logging_data": None}


def _bucket_times(it: dict, members: list[list[int]], gpu: bool) -> None:
    """Each bucket's ready time: its last gradient's; a collective without GPU work sits there."""
    ready = {g["param"]: g["t_ns"] for g in it["grad_ready"]}
    for ev, m in zip(it["buckets"], members):
        times = [ready[p] for p in m if p in ready]
        ev["ready_ns"] = max(times) if times else ev["cpu_launch_ns"]
        if ev["launch_ns"] is None:  # no GPU work: a zero-length collective at ready time
            ev["launch_ns"] = ev["complete_ns"] = ev["ready_ns"]
        if not gpu:
            ev.pop("cpu_launch_ns")  # the launch is already on the CPU clock
