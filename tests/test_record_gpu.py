"""GPU times in the recorder: CUDA events placed on the host clock, CPU enqueue times kept beside.

The arithmetic of ``GpuTimer.resolve`` runs everywhere (with a stand-in for a CUDA event, since
this machine has none); the recordings are marked ``gpu`` and run only where CUDA is.
"""
import pytest
import torch

from ddpsim.record.config import visible_gpus
from ddpsim.record.gpuclock import GpuTimer, timebase

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU")


class _Event:
    """Stands in for torch.cuda.Event: a GPU timestamp in ms on the device's own clock."""

    def __init__(self, ms):
        self.ms = ms

    def elapsed_time(self, other):
        return other.ms - self.ms

    def synchronize(self):
        pass


def test_resolve_places_events_on_the_host_clock_and_keeps_cpu_times():
    timer = GpuTimer(torch.device("cpu"))
    timer.ref_event, timer.ref_ns = _Event(1000.0), 5_000_000_000  # anchor: GPU 1000 ms = host 5 s
    grad = {"t_ns": 5_000_100_000, "param": 3}  # the hook ran (CPU) at host 5.0001 s
    bucket = {"launch_ns": 5_000_200_000, "complete_ns": 5_000_300_000}
    timer.pending = [(_Event(1002.5), grad, "t_ns", "cpu_t_ns"),  # the GPU got there 2.5 ms later
                     (_Event(1003.0), bucket, "launch_ns", "cpu_launch_ns"),
                     (_Event(1010.25), bucket, "complete_ns", "cpu_complete_ns")]
    timer.resolve()
    assert grad == {"t_ns": 5_002_500_000, "cpu_t_ns": 5_000_100_000, "param": 3}
    assert bucket == {"launch_ns": 5_003_000_000, "cpu_launch_ns": 5_000_200_000,
                      "complete_ns": 5_010_250_000, "cpu_complete_ns": 5_000_300_000}
    assert timer.pending == []


def test_timebase_says_which_clock():
    assert set(timebase("cuda").values()) >= {"gpu", "cpu"} and timebase("cuda")["grad_ready"] == "gpu"
    assert timebase("cpu")["grad_ready"] == "cpu"


@pytest.mark.gpu
@pytest.mark.slow
@needs_gpu
def test_nccl_recording_is_on_the_gpus_clock(record):
    trace = record(model="transformer", world_size=1, iters=4, backend="nccl")
    assert trace.meta["backend"] == "nccl" and trace.meta["timebase"]["grad_ready"] == "gpu"
    for it in trace.ranks[0].iterations[1:]:
        assert all(g.cpu_t_ns is not None for g in it.grad_ready)
        last = max(g.t_ns for g in it.grad_ready)
        assert it.backward.start_ns <= min(g.t_ns for g in it.grad_ready) and last <= it.backward.end_ns
        for b in it.buckets:
            assert b.cpu_launch_ns is not None and b.launch_ns <= b.complete_ns
            assert b.complete_ns <= it.backward.end_ns  # DDP waits for it before backward returns


@pytest.mark.gpu
@pytest.mark.slow
@needs_gpu
def test_gloo_with_cuda_tensors(record):
    world = 2
    trace = record(model="mlp", world_size=world, iters=3, backend="gloo", device="cuda")
    assert trace.meta["backend"] == "gloo" and trace.meta["placement"]["device"] == "cuda"
    assert all(len(r.iterations) == 3 for r in trace.ranks)
    assert visible_gpus()[0] >= 1
