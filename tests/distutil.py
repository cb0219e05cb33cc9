"""Run a function on N real gloo ranks (spawned processes) and collect the results.

    results = run_ranks(fn, world_size=2, args=(...,), timeout=120)

``fn(rank, world_size, *args)`` must be a picklable top-level function; it runs
after ``init_process_group("gloo")`` on 127.0.0.1 with a free port and
``torch.set_num_threads(1)``; its return value (picklable) is rank ``rank``'s
result. If a rank raises, dies or the timeout passes, every rank is killed and
``RankFailure`` says which rank failed and why (with its traceback).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import socket
import time
import traceback


class RankFailure(AssertionError):
    """A rank raised, died or timed out; ``.rank`` and ``.error`` say which and why."""

    def __init__(self, rank, error):
        super().__init__(f"rank {rank} failed: {error}")
        self.rank, self.error = rank, error


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank, world_size, port, args, results):
    try:
        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        os.environ.setdefault("TORCH_DISTRIBUTED_DEBUG", "OFF")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world_size)
        try:
            out = fn(rank, world_size, *args)
        finally:
            dist.destroy_process_group()
        results.put((rank, True, out))
    except BaseException:  # report everything, including KeyboardInterrupt
        results.put((rank, False, traceback.format_exc()))


def run_ranks(fn, world_size: int = 2, args: tuple = (), timeout: float = 120.0):
    """Run ``fn`` on ``world_size`` gloo ranks; returns the per-rank results as a list."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world_size, port, args, results),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    outs, deadline, done = {}, time.monotonic() + timeout, False
    try:
        while len(outs) < world_size:
            try:
                rank, ok, value = results.get(timeout=0.2)
            except queue.Empty:
                _check_alive(procs, outs, deadline, timeout)
                continue
            if not ok:
                raise RankFailure(rank, value)
            outs[rank] = value
        done = True
        return [outs[r] for r in range(world_size)]
    finally:
        _stop(procs, grace=10.0 if done else 0.0)


def _check_alive(procs, outs, deadline, timeout):
    for rank, p in enumerate(procs):
        if rank not in outs and p.exitcode is not None:
            raise RankFailure(rank, f"process exited with code {p.exitcode} without a result")
    if time.monotonic() > deadline:
        raise RankFailure(-1, f"timed out after {timeout:.0f} s (a rank hangs?)")


def _stop(procs, grace):
    end = time.monotonic() + grace
    for p in procs:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(timeout=5)
