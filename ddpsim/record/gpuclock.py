"""GPU times for the recorder: CUDA events, resolved after each iteration onto the host clock.

On a GPU the Python hooks run when the CPU *queues* work, often milliseconds before the GPU does
it (a ResNet-50 backward on an H100: last hook 11-16 ms after the backward start, the backward's
GPU work 17-20 ms). So on CUDA every probe also records a CUDA event on the stream whose work it
is about; after the iteration the events are read and placed on the host clock.

Note [Events on the right stream]:
- gradient ready: an event on the current stream inside the post-accumulate-grad hook. The
  stream runs in order, so the event completes when the gradient's kernels have finished.
- allreduce launch: an event on the current (compute) stream in the comm hook, before the
  collective: the bucket's gradients are in its buffer on the GPU. NCCL's stream waits for that
  point, so the collective cannot start earlier (it may start later, behind the previous one).
- allreduce complete: an event recorded inside the future's ``then`` callback. For CUDA futures
  torch runs the callback with current streams made to wait on the collective's completion, so
  this event completes when the NCCL kernel (or gloo's copy back to the device) has.
- forward, backward, optimizer: events on the current stream at the span boundaries.

Note [Host clock alignment]: at a sync point (the stream idle), ``anchor`` records an event
between two host readings and waits for it; with the narrowest of a few tries the event's host
time is the midpoint, good to a few microseconds. Every other event is placed at
``anchor_ns + anchor.elapsed_time(event)``. One anchor per iteration keeps clock drift out.
"""
from __future__ import annotations

import torch

from ddpsim.events import now_ns

ANCHOR_TRIES = 3  # event/host pairs per anchor; the narrowest host window wins


def new_event():
    """A timing CUDA event: the one place the recorder makes one (a test without a GPU puts a
    host-clock stand-in here, leaving torch.cuda alone)."""
    return torch.cuda.Event(enable_timing=True)


def wait_for_stream(device: torch.device) -> None:
    """Wait until the device's current stream has run everything queued on it."""
    torch.cuda.current_stream(device).synchronize()


class GpuTimer:
    """Collects (event, dict, key) triples; ``resolve`` writes the events' host-clock times."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pending: list[tuple] = []  # (event, target dict, key for the GPU time, key for the CPU time)
        self.ref_event = None
        self.ref_ns = 0

    def anchor(self) -> None:
        """Pair a CUDA event with a host time at a sync point (Note [Host clock alignment])."""
        best = None
        for _ in range(ANCHOR_TRIES):
            wait_for_stream(self.device)
            ev = new_event()
            before = now_ns()
            ev.record()
            ev.synchronize()
            after = now_ns()
            if best is None or after - before < best[2] - best[1]:
                best = (ev, before, after)
        self.ref_event, self.ref_ns = best[0], (best[1] + best[2]) // 2

    @staticmethod
    def mark():
        """A timing event recorded now on the current stream."""
        ev = new_event()
        ev.record()
        return ev

    def later(self, target: dict, key: str, cpu_key: str | None = None) -> None:
        """Record an event now; at ``resolve``, ``target[key]`` becomes its GPU time and the CPU
        time already in ``target[key]`` moves to ``target[cpu_key]`` (kept beside it)."""
        self.pending.append((self.mark(), target, key, cpu_key))

    def host_ns(self, event) -> int:
        return self.ref_ns + int(round(self.ref_event.elapsed_time(event) * 1e6))

    def resolve(self) -> None:
        """Wait for the recorded events and write their host-clock times."""
        for ev, target, key, cpu_key in self.pending:
            ev.synchronize()
            if cpu_key is not None:
                target[cpu_key] = target.get(key)
            target[key] = self.host_ns(ev)
        self.pending = []


def timebase(device_type: str) -> dict:
    """meta.timebase of a recording: which clock each time is on (docs/trace-format.md)."""
    if device_type == "cuda":
        return {"forward": "gpu", "backward": "gpu", "optimizer": "gpu", "grad_ready": "gpu",
                "allreduce": "gpu", "graph_search": "cpu", "bitmap_allreduce": "cpu", "source": "cuda-events",
                "note": "gpu: CUDA events on the work's stream, placed on the host clock; the CPU "
                        "times the hooks ran (the work was queued) are kept in cpu_t_ns / cpu_launch_ns"}
    return {"forward": "cpu", "backward": "cpu", "optimizer": "cpu", "grad_ready": "cpu",
            "allreduce": "cpu", "source": "host", "note": "cpu: perf_counter_ns when the host ran it"}
