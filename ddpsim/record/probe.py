"""Time gloo allreduces of a few sizes inside running ranks: the cost line's raw data.

``ddpsim calibrate`` uses it in ranks of its own; a recording uses it in its own
ranks between rounds of iterations (``RecordConfig.probe_allreduce_bytes``), so
that the line is measured at the same moments as the runs it is used to predict.
``timings`` is the timing loop the other micro-benchmarks share (hookprobe.py,
experiments/dp_pieces.py).
"""
from __future__ import annotations

import statistics
import time


def timings(fn, reps: int, warmup: int, sync=None) -> list[float]:
    """Seconds of each of ``reps`` calls of ``fn``, after ``warmup`` untimed ones; ``sync`` (e.g.
    ``torch.cuda.synchronize``) after each call, so that a GPU's queued work is timed too."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return times


class AllreduceProbe:
    """Times ``dist.all_reduce`` of float32 tensors of the given sizes, one of each per
    ``time_each`` call (after a barrier, so every rank starts together): wall time
    (``perf_counter``) and the process's CPU time (``process_time``, gloo's threads
    included). ``calibrate`` calls it ``reps`` times in a row; the recorder calls it
    once after every round of iterations (Note [Calibrate in the recording's ranks]).
    """

    def __init__(self, sizes: list[int]):
        import torch
        import torch.distributed as dist

        self.dist = dist
        self.tensors = [torch.ones(max(1, n // 4)) for n in sizes]
        for x in self.tensors:
            dist.all_reduce(x)  # warm-up
        self.wall: list[list[float]] = [[] for _ in sizes]
        self.cpu: list[list[float]] = [[] for _ in sizes]

    def time_each(self) -> None:
        for x, wall, cpu in zip(self.tensors, self.wall, self.cpu):
            self.dist.barrier()
            t, c = time.perf_counter(), time.process_time()
            self.dist.all_reduce(x)
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)

    def rows(self) -> list[tuple[int, float, float]]:
        """[(bytes, mean wall s, lower-quartile CPU s)] per size (``calibrate.measure``)."""
        return [(x.numel() * 4, statistics.mean(w), lower_quartile(c))
                for x, w, c in zip(self.tensors, self.wall, self.cpu) if w]


def lower_quartile(xs: list[float]) -> float:
    """The 25th percentile: an allreduce's CPU work without its spinning.

    Note [Spinning is not work]: on this machine an allreduce's CPU time is
    bimodal: ~1 ms for 2.3 MiB at 2 ranks most of the time, but sometimes equal to
    its wall time (~3.7 ms), a thread polling while it waits for the peer. Such a
    thread yields the core as soon as autograd wants it: in training, 15 such
    allreduces overlapping backward slowed it by ~1 ms each, not ~3 ms
    (shuffled, cap 0.25 MiB, validate grid 2026-11-21). The median would count the
    polling; the lower quartile keeps the work.
    """
    xs = sorted(xs)
    return xs[(len(xs) - 1) // 4]
