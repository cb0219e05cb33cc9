"""One rank of a recording: build the model, wrap it in DDP, train, record.

Started either by ddpsim's launcher (``python -m ddpsim record``) or by
``torchrun``; both hand over RANK and WORLD_SIZE in the environment, and
LOCAL_RANK picks the GPU with NCCL. The launcher adds DDPSIM_STORE (a private
FileStore: Note [No port on the network]) and DDPSIM_HEARTBEAT (heartbeat.py);
torchrun gives MASTER_ADDR and MASTER_PORT for its own rendezvous.

    python -m ddpsim.record.worker CONFIGS_JSON SHARD_PATH [SHARD_PATH ...]
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

from ddpsim import heartbeat, torchcompat
from ddpsim.buckets import tensor_bytes
from ddpsim.events import RankRecorder, now_ns
from ddpsim.models import build_workload, call_batch
from ddpsim.record import cpus, hookprobe, instrument
from ddpsim.record.clock import estimate_offsets
from ddpsim.record.config import RecordConfig
from ddpsim.record.placement import Placement
from ddpsim.record.gpuclock import GpuTimer, timebase
from ddpsim.record.joined import train_joined
from ddpsim.record.probe import AllreduceProbe
from ddpsim.record.process import die_with_parent, env_rank, exit_now, init_process_group, pin_to_cpu
from ddpsim.record.turns import Turns
from ddpsim.record.wrap import TorchProbes, wrap_model


def gpu_timed(device, cfg: RecordConfig) -> bool:
    """Whether a run is timed with CUDA events: torch's DDP on CUDA tensors."""
    return device.type == "cuda" and cfg.impl == "torch" and not cfg.comm_hook  # a hook: host times (usage.md)


class Run:
    """One DDP configuration trained and recorded in this rank process.

    A rank usually holds one Run. ``validate --grid`` gives it several, of the same
    model, that take turns iteration by iteration (see ``train``), so that a slow
    spell of the machine hits every configuration alike.
    """

    def __init__(self, cfg: RecordConfig, rank: int, world: int, device, recorder: RankRecorder):
        self.cfg, self.rank, self.world, self.device, self.recorder = cfg, rank, world, device, recorder
        torch.manual_seed(cfg.seed)
        self.workload = build_workload(cfg.model)
        self.model = self.workload.model.to(device)
        recorder.header_update({"params": instrument.param_table(self.model),
                                "buffer_bytes": tensor_bytes(self.model.buffers())})
        heartbeat.beat(stage="wrapping the model in DDP")
        self.ddp = wrap_model(cfg, self.model, recorder, device)
        # On CUDA, torch's DDP is timed by CUDA events (gpuclock.py); minddp/naive report CPU times.
        self.timer = GpuTimer(device) if gpu_timed(device, cfg) else None
        recorder.header_update({"timebase": timebase("cuda" if self.timer else "cpu")})
        self.probes = TorchProbes(cfg, self.ddp, recorder, self.timer) if cfg.impl == "torch" else None
        self.opt = torch.optim.SGD(self.model.parameters(), lr=cfg.lr)
        self.sync_device = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def batch(self, it: int) -> tuple:
        """This rank's batch for micro-step ``it``, on the device: (inputs tuple, target)."""
        inputs, target = call_batch(self.workload, it, self.rank, self.world, self.cfg.batch_size)
        return tuple(x.to(self.device) for x in inputs), target.to(self.device)

    def step(self, it: int, batch: tuple | None = None) -> None:
        """One recorded micro-step: forward, backward and (when synced) the optimizer.
        ``batch``: ``self.batch(it)`` made beforehand (a benchmark times the step without it)."""
        cfg, rec, probes = self.cfg, self.recorder, self.probes
        sync = cfg.is_sync(it)
        inputs, target = batch or self.batch(it)
        if probes:
            probes.before(sync)
            if cfg.join and not cfg.divide_by_initial_world_size:  # Note [Join's divisor in the recorder's hook]
                probes.comm_state.world_size = sum(cfg.iters_for(r) > it for r in range(self.world))
        if self.timer:
            self.timer.anchor()
        rec.begin_iteration(it, sync)
        heartbeat.beat(iteration=it, phase="forward")
        if self.timer:  # GPU spans from events; no device sync inside the iteration
            self._step_timed(sync, inputs, target)
        else:
            with contextlib.nullcontext() if sync else self.ddp.no_sync():
                f0 = now_ns()
                loss = self.workload.loss(self.ddp(*inputs), target)
                self.sync_device()
                f1 = now_ns()
                heartbeat.beat(phase="backward")
                c1 = time.thread_time_ns()  # Note [The backward's compute alone] in instrument.py
                loss.backward()
                c2 = time.thread_time_ns()
                self.sync_device()
                b1 = now_ns()
            rec.span("forward", f0, f1)
            rec.span("backward", f1, b1)
            if probes and self.device.type == "cpu":  # a GPU rank's thread only queues the kernels
                rec.iteration["backward_cpu_ns"] = c2 - c1
            if sync:
                heartbeat.beat(phase="optimizer")
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
                self.sync_device()
                rec.span("optimizer", b1, now_ns())
        if probes:
            probes.after(sync, rec)
        rec.end_iteration(probes.layout_caps if probes else None, rebuilt=probes.just_rebuilt() if probes else False)
        heartbeat.beat(phase="done")

    def _step_timed(self, sync: bool, inputs, target) -> None:
        """One micro-step on CUDA: span boundaries are CUDA events (gpuclock.py), resolved at the end."""
        rec, timer = self.recorder, self.timer
        marks = {}

        def mark(name):  # the host time now; its GPU time ("t") once the event resolves
            marks[name] = {"t": now_ns()}
            timer.later(marks[name], "t", "cpu")

        with contextlib.nullcontext() if sync else self.ddp.no_sync():
            mark("f0")
            loss = self.workload.loss(self.ddp(*inputs), target)
            mark("f1")
            heartbeat.beat(phase="backward")
            loss.backward()
            mark("b1")
        if sync:
            heartbeat.beat(phase="optimizer")
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            mark("o1")
        timer.resolve()
        rec.span("forward", marks["f0"]["t"], marks["f1"]["t"])
        rec.span("backward", marks["f1"]["t"], marks["b1"]["t"])
        if sync:
            rec.span("optimizer", marks["b1"]["t"], marks["o1"]["t"])
        cpu = {k: m["cpu"] for k, m in marks.items()}  # the host times the work was queued
        rec.iteration["cpu_spans"] = {"forward": {"start_ns": cpu["f0"], "end_ns": cpu["f1"]},
                                      "backward": {"start_ns": cpu["f1"], "end_ns": cpu["b1"]},
                                      **({"optimizer": {"start_ns": cpu["b1"], "end_ns": cpu["o1"]}}
                                         if sync else {})}
        rec.iteration["anchor_window_ns"] = timer.window_ns  # Note [Host clock alignment] in gpuclock.py

    def logging_data(self) -> dict | None:
        """``_get_ddp_logging_data()`` of torch's DDP or of minddp's (which mirrors it: minddp/logging_data.py);
        the naive DDP has none."""
        return torchcompat.ddp_logging_data(self.ddp) if self.cfg.impl in ("torch", "minddp") else None


def train(cfgs: list[RecordConfig], rank: int, world: int, device, recorders: list[RankRecorder]) -> bool:
    """Build every Run, align clocks, then step them in turn: iteration i of each, then i + 1
    (each such round in this group's turn, when groups of other world sizes record beside it).
    False if this rank ran out of data before the others (``--uneven``)."""
    heartbeat.beat(stage="building the model")
    runs = [Run(c, rank, world, device, r) for c, r in zip(cfgs, recorders)]
    heartbeat.beat(stage="aligning clocks")
    clock = estimate_offsets(device)
    for r in recorders:
        r.header_update({"clock": clock})
    probes = [(AllreduceProbe(r.cfg.probe_allreduce_bytes), r) for r in runs if r.cfg.probe_allreduce_bytes]
    turns = Turns.from_env()  # Note [Take turns across world sizes]; None unless the launcher asked
    heartbeat.beat(stage="training")
    if turns:
        turns.ready(rank)
    mine = [c.iters_for(rank) for c in cfgs]  # uneven inputs: fewer batches on later ranks
    if cfgs[0].join:  # one config: validate --grid and turns never join
        train_joined(runs[0], mine[0])
        mine = [c.iters for c in cfgs]  # every rank stays in Join to the end
    for it in range(0 if cfgs[0].join else max(mine)):
        if turns:
            turns.take(cfgs[0].timeout_s)
        for run, n in zip(runs, mine):
            if it < n:
                run.step(it)
            if len(runs) > 1 and run.cfg.comm_hook == "noop":  # Note [A noop step leaves the ranks apart]
                dist.barrier()  # ... in hookwatch.py: the next run's step starts with the ranks together
        for probe, _ in probes:  # Note [Calibrate in the recording's ranks]
            probe.time_each()
        if turns:
            dist.barrier()  # the whole group's round is over before rank 0 hands the turn on
            turns.hand_on(rank)
    if turns:
        if rank == 0:
            turns.end()
        for r in recorders:
            r.header_update({"turns": {"world_sizes": turns.world_sizes, "group": turns.group, "spans_ns": turns.spans}})
    if hookprobe.every_rank_here(cfgs, turns):  # Note [What a plain run cannot show]
        hookprobe.write_rates(recorders, device, world, runs[0].model)
    for probe, run in probes:
        run.recorder.header_update({"allreduce_probe": probe.rows()})
    for run in runs:
        run.recorder.finish(run.logging_data())
    if max(mine) < max(c.iters for c in cfgs):  # Note [A rank out of data] in heartbeat.py
        heartbeat.beat(stage="out of data", iteration=max(mine) - 1)
        return False
    return True


def run_rank(cfgs: list[RecordConfig], shard_paths: list[str], header: dict | None = None) -> None:
    """Run this process's rank and write one shard per config. Exits the process on failure."""
    die_with_parent()
    rank, world, local = env_rank()
    cfg = cfgs[0]  # world size, backend, timeout and pinning are shared by all configs
    placement = Placement.for_rank(cfg)  # the launcher's (Note [CPU ranks see no GPU] in placement.py)
    backend = placement.backend
    torch.set_num_threads(1)
    header = {**(header or {}), "placement": {"device": placement.device, "reason": placement.reason}}
    if placement.device == "cuda":  # nccl: GPU local_rank; gloo --device cuda: GPUs shared round-robin
        device = torch.device("cuda", local % torch.cuda.device_count())
        torch.cuda.set_device(device)
        header["gpu"] = torch.cuda.get_device_name(device)  # its node for the What-if (learn/hardware.py)
    else:
        device = torch.device("cpu")
        if cfg.pin_cpus:  # the simulator needs to know which ranks shared a core
            header = {**(header or {}), "pinning": {"cpus": len(os.sched_getaffinity(0)), "rule": (
                "local rank r on CPU r % cpus, the least used first" if os.environ.get(cpus.ENV)
                else "local rank r on CPU r % cpus")}}  # Note [Recordings share the machine's CPUs]
            pin_to_cpu(local)
    from ddpsim.record.meta import rank_header
    recorders = [RankRecorder(path, rank, rank_header(c, backend, world, header))
                 for c, path in zip(cfgs, shard_paths)]
    try:
        heartbeat.beat(stage="joining the process group")
        init_process_group(backend, rank, world, cfg.timeout_s)
        if train(cfgs, rank, world, device, recorders):
            heartbeat.beat(stage="finishing")
        dist.barrier()  # every shard is complete on disk once this returns; a rank out of data waits here
    except BaseException as e:  # noqa: BLE001 - every failure is recorded, then the rank exits
        message = f"{type(e).__name__}: {str(e).strip()}"
        for r in recorders:
            r.fail(message)
        print(f"ddpsim rank {rank}: {message.splitlines()[0] if message else type(e).__name__}",
              file=sys.stderr, flush=True)
        os._exit(1)  # do not wait on collectives that will never finish


def main(argv: list[str]) -> None:
    """argv: a JSON list of configs, then one shard path per config."""
    heartbeat.open_writer()
    cfgs = [RecordConfig(**c) for c in json.loads(argv[0])]
    run_rank(cfgs, argv[1:])
    exit_now(0)


if __name__ == "__main__":
    main(sys.argv[1:])
