"""GPU times in the recorder: CUDA events placed on the host clock, CPU enqueue times kept beside.

The arithmetic of ``GpuTimer.resolve`` runs everywhere (with a stand-in for a CUDA event, since
this machine has none); the recordings are marked ``gpu`` and run only where CUDA is.
"""
import pytest
import torch

from ddpsim.record.placement import visible_gpus
from ddpsim.record import gpuclock
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


def test_resolve_places_events_on_the_host_clock_and_keeps_cpu_times(monkeypatch):
    monkeypatch.setattr(gpuclock, "wait_for_stream", lambda device: None)  # no device to wait for here
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


class _Work:
    """Stands in for an NCCL Work: ``_get_duration`` is its kernel's start-to-end time in ms."""

    def __init__(self, ms):
        self.ms = ms

    def _get_duration(self):
        if self.ms is None:
            raise RuntimeError("getDuration only works if ncclStartEvents_ is populated")
        return self.ms


def test_an_nccl_collectives_end_is_its_start_plus_torchs_elapsed_time(monkeypatch):
    """Note [An NCCL collective's end]: start = max(launch, previous end), at most the side event."""
    monkeypatch.setattr(gpuclock, "wait_for_stream", lambda device: None)
    timer = GpuTimer(torch.device("cpu"))
    timer.ref_event, timer.ref_ns = _Event(1000.0), 0  # GPU 1000 ms = host 0
    first, second, third = ({"launch_ns": 1, "complete_ns": 2} for _ in range(3))
    timer.pending = [(_Event(1001.0), first, "launch_ns", None), (_Event(1005.0), first, "complete_ns", None),
                     (_Event(1002.0), second, "launch_ns", None), (_Event(1006.0), second, "complete_ns", None),
                     (_Event(1007.0), third, "launch_ns", None), (_Event(1009.0), third, "complete_ns", None)]
    timer.collectives = [(_Work(2.0), first, "launch_ns", "complete_ns"),  # runs 1 ms .. 3 ms
                         (_Work(0.5), second, "launch_ns", "complete_ns"),  # queued behind it: 3 .. 3.5
                         (_Work(None), third, "launch_ns", "complete_ns")]  # timing off: the side event
    timer.resolve()
    assert [d["complete_ns"] for d in (first, second, third)] == [3_000_000, 3_500_000, 9_000_000]
    assert timer.collectives == []


def test_events_are_made_once_and_reused_every_iteration(monkeypatch):
    """Note [Few host calls per event]: the second iteration makes no new event."""
    monkeypatch.setattr(gpuclock, "wait_for_stream", lambda device: None)
    monkeypatch.setattr(gpuclock, "new_event", _CpuEvent)
    monkeypatch.setattr(gpuclock, "current_stream", lambda device: None)  # no CUDA stream here
    timer = GpuTimer(torch.device("cpu"))
    timer.anchor()
    seen = []
    for _ in range(2):
        rows = [{"t": i} for i in range(3)]
        for row in rows:
            timer.later(row, "t", "cpu")
        seen.append([ev for ev, *_ in timer.pending])
        timer.resolve()
        assert all(r["cpu"] == i and r["t"] >= timer.ref_ns for i, r in enumerate(rows))
    assert [id(e) for e in seen[0]] == [id(e) for e in seen[1]] and len(timer.pool) == 3


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


class _CpuEvent:
    """A torch.cuda.Event stand-in that timestamps on the host when recorded (this machine has no GPU)."""

    def __init__(self, enable_timing=True):
        self.t = None

    def record(self, stream=None):
        import time
        self.t = time.perf_counter_ns()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other.t - self.t) / 1e6


def _timed_rank(rank, world, shard_dir):
    """The recorder's CUDA-event path on real gloo DDP, with host-stamped stand-in events."""
    import torch

    from ddpsim.events import RankRecorder
    from ddpsim.record import gpuclock, worker
    from ddpsim.record.config import RecordConfig

    gpuclock.new_event = _CpuEvent  # torch.cuda stays as it is (torch 2.4's dynamo checks its Event class)
    gpuclock.wait_for_stream = lambda device: None
    gpuclock.current_stream = lambda device: None  # no CUDA stream here
    worker.gpu_timed = lambda device, cfg: True
    cfg = RecordConfig(model="mlp", world_size=world, iters=4, backend="gloo")
    path = f"{shard_dir}/run.json.rank{rank}.jsonl"
    rec = RankRecorder(path, rank, {"world_size": world, "backend": "gloo", "impl": "torch"})
    run = worker.Run(cfg, rank, world, torch.device("cpu"), rec)
    for it in range(cfg.iters):
        run.step(it)
    rec.finish(None)
    return path


@pytest.mark.slow
def test_cuda_event_path_runs_end_to_end_on_real_ddp(tmp_path):
    """Every probe of the GPU path (hooks, comm hook, then-callback, spans, resolve) on real DDP."""
    from distutil import run_ranks

    from ddpsim.record.merge import merge_files

    shards = run_ranks(_timed_rank, 2, args=(str(tmp_path),), timeout=300)
    trace = merge_files(shards, tmp_path / "run.json")
    assert trace.meta["timebase"]["grad_ready"] == "gpu"
    raw = __import__("json").loads((tmp_path / "run.json").read_text())
    for rank, raw_rank in zip(trace.ranks, raw["ranks"]):
        for it, raw_it in zip(rank.iterations, raw_rank["iterations"]):
            assert {"forward", "backward", "optimizer"} <= set(raw_it["cpu_spans"])
            assert raw_it["anchor_window_ns"] >= 0  # Note [Host clock alignment]
            assert it.grad_ready and all(0 <= g.t_ns - g.cpu_t_ns < 50_000_000 for g in it.grad_ready)
            for b in it.buckets:
                assert b.cpu_launch_ns is not None and b.cpu_complete_ns is not None
                assert b.ready_ns <= b.launch_ns <= b.complete_ns <= it.backward.end_ns
            assert it.forward.end_ns == it.backward.start_ns < it.optimizer.start_ns + 1
        assert len(rank.layouts) == 2 and rank.layouts[1].kind == "rebuilt"
