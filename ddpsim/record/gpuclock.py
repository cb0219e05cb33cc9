"""GPU times for the recorder: CUDA events, resolved after each iteration onto the host clock.

On a GPU the Python hooks run when the CPU *queues* work, often milliseconds before the GPU does
it (a ResNet-50 backward on an H100: last hook 11-16 ms after the backward start, the backward's
GPU work 17-20 ms). So on CUDA every probe also records a CUDA event on the stream whose work it
is about; after the iteration the events are read and placed on the host clock.

Note [Events on the right stream]:
- gradient ready: an event on the current stream inside the post-accumulate-grad hook. The
  stream runs in order, so the event completes when the gradient's kernels have finished.
- allreduce launch: an event on the current (compute) stream in the comm hook, right before the
  collective (after the division by the world size): the bucket's gradients are in its buffer on
  the GPU. NCCL's stream waits for that point, so the collective cannot start earlier (it may
  start later, behind the previous one).
- allreduce complete, NCCL: Note [An NCCL collective's end].
- allreduce complete, gloo with CUDA tensors: an event recorded inside the future's ``then``
  callback, which torch runs with the current streams made to wait for gloo's copy back to the
  device (``work.wait()`` would block the host there).
- forward, backward, optimizer: events on the current stream at the span boundaries.

Note [Host clock alignment]: at a sync point (the stream idle), ``anchor`` records an event
between two host readings and waits for it; with the narrowest of a few tries the event's host
time is the midpoint, good to half that window (8 to 12 us on an H200 with torch 2.11, whose
windows were 15 to 24 us; a first iteration's can be ten times that). Every other event is placed at
``anchor_ns + anchor.elapsed_time(event)``. One anchor per iteration keeps clock drift out; each
iteration of a recording keeps its anchor's window (``anchor_window_ns``, docs/trace-format.md).

Note [An NCCL collective's end]: any event the host records after launching a collective
completes no earlier than the host recorded it. Where the kernel ends before that (one rank, a
small bucket, a host slower than the GPU) such an event is late: at one rank on an H200, where
NCCL ran no kernel at all, one recorded in the future's ``then`` callback came a median 0.25 ms
after the bucket's gradients were ready, one on a side stream made to wait for the collective
(``work.wait()``) 0.2 ms. So the end comes from ProcessGroupNCCL's own start and end events,
which it records on its stream around the kernel (on with TORCH_NCCL_ENABLE_TIMING=1, which
``record.process.init_process_group`` sets): end = start + their elapsed time, where the start is
the later of this bucket's launch event and the previous collective's end (one NCCL stream runs
them in order). The side-stream event stays as an upper bound, and is the end where torch cannot
give the elapsed time.

Note [Few host calls per event]: a recorded iteration holds about as many events as the model has
parameters, and on a fast GPU the host is often the bottleneck, so each event costs as little host
time as it can: events are made once and reused every iteration (``mark``), they are recorded on a
stream looked up once per iteration at the anchor (``torch.cuda.current_stream()`` walks several
Python layers per call: in a cProfile of the H200's transformer it cost seven times the record itself), and
``resolve`` waits for the device once, then only reads the elapsed times. The backward's hooks see
the same current stream as the forward (autograd runs each gradient on its forward op's stream).
"""
from __future__ import annotations

import torch

from ddpsim import torchcompat
from ddpsim.events import now_ns

ANCHOR_TRIES = 3  # event/host pairs per anchor; the narrowest host window wins


def new_event():
    """A timing CUDA event: the one place the recorder makes one (a test without a GPU puts a
    host-clock stand-in here, leaving torch.cuda alone)."""
    return torch.cuda.Event(enable_timing=True)


def wait_for_stream(device: torch.device) -> None:
    """Wait until the device has run everything queued on it, on every stream."""
    torch.cuda.synchronize(device)


def current_stream(device: torch.device):
    """The stream that work on ``device`` is queued to now (one lookup: Note [Few host calls per event])."""
    return torch.cuda.current_stream(device)


class GpuTimer:
    """Collects (event, dict, key) triples; ``resolve`` writes the events' host-clock times."""

    def __init__(self, device: torch.device):
        self.device = device
        self.pending: list[tuple] = []  # (event, target dict, key for the GPU time, key for the CPU time)
        self.ref_event = None
        self.ref_ns = 0
        self.window_ns = 0  # the last anchor's host window: GPU times are good to half of it
        self.pool: list = []  # events made once, reused each iteration (Note [Few host calls per event])
        self.used = 0  # events of the pool recorded since the last resolve
        self.side = None  # the stream NCCL completion events are recorded on (made on first use)
        self.stream = None  # the iteration's current stream, read at the anchor (Note [Few host calls per event])
        self.collectives: list[tuple] = []  # (work, target dict, launch key, end key), in launch order

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
        self.window_ns = best[2] - best[1]
        self.stream = current_stream(self.device)

    def mark(self, stream=None):
        """A timing event (from the pool) recorded now on ``stream`` (the iteration's stream)."""
        if self.used == len(self.pool):
            self.pool.append(new_event())
        ev = self.pool[self.used]
        self.used += 1
        ev.record(stream or self.stream or current_stream(self.device))
        return ev

    def later(self, target: dict, key: str, cpu_key: str | None = None, stream=None) -> None:
        """Record an event now; at ``resolve``, ``target[key]`` becomes its GPU time and the CPU
        time already in ``target[key]`` moves to ``target[cpu_key]`` (kept beside it)."""
        self.pending.append((self.mark(stream), target, key, cpu_key))

    def after_collective(self, work, target: dict, launch_key: str, key: str, cpu_key: str | None = None) -> None:
        """Time an NCCL collective's end into ``target[key]`` (Note [An NCCL collective's end]);
        ``target[launch_key]`` is its launch, already passed to ``later``."""
        if self.side is None:
            self.side = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self.side):
            work.wait()  # NCCL: the side stream waits for the collective; the host does not
            self.later(target, key, cpu_key, stream=self.side)
        self.collectives.append((work, target, launch_key, key))

    def _collective_ends(self) -> None:
        """End = start + NCCL's own elapsed time, start = max(launch, previous end), at most the
        side-stream event (Note [An NCCL collective's end]). After the events are resolved."""
        previous_end = None
        for work, target, launch_key, key in self.collectives:
            ms = torchcompat.nccl_elapsed_ms(work)
            if ms is not None:
                start = target[launch_key] if previous_end is None else max(target[launch_key], previous_end)
                target[key] = min(target[key], start + int(round(ms * 1e6)))
            previous_end = target[key]
        self.collectives = []

    def host_ns(self, event) -> int:
        return self.ref_ns + int(round(self.ref_event.elapsed_time(event) * 1e6))

    def resolve(self) -> None:
        """Wait for the recorded events (one wait for the device) and write their host-clock times."""
        if self.pending:
            wait_for_stream(self.device)
        for ev, target, key, cpu_key in self.pending:
            if cpu_key is not None:
                target[cpu_key] = target.get(key)
            target[key] = self.host_ns(ev)
        self.pending = []
        self.used = 0
        self._collective_ends()


def timebase(device_type: str) -> dict:
    """meta.timebase of a recording: which clock each time is on (docs/trace-format.md)."""
    if device_type == "cuda":
        return {"forward": "gpu", "backward": "gpu", "optimizer": "gpu", "grad_ready": "gpu",
                "allreduce": "gpu", "graph_search": "cpu", "bitmap_allreduce": "cpu", "source": "cuda-events",
                "note": "gpu: CUDA events on the work's stream, placed on the host clock; the CPU "
                        "times the hooks ran (the work was queued) are kept in cpu_t_ns / cpu_launch_ns"}
    return {"forward": "cpu", "backward": "cpu", "optimizer": "cpu", "grad_ready": "cpu",
            "allreduce": "cpu", "source": "host", "note": "cpu: perf_counter_ns when the host ran it"}
