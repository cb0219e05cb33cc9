"""A SIMULATED ``nn.DataParallel`` iteration: one process, N devices, threads under the GIL.

What it mirrors in torch (``torch/nn/parallel/data_parallel.py``, ``DataParallel.forward``):

1. ``scatter`` (``scatter_kwargs`` -> ``Scatter.apply`` -> ``comm.scatter``): the batch is cut
   into N chunks on dim 0 and chunk j is copied from device 0 to device j;
2. ``replicate`` (``replicate.py``): every parameter and buffer is copied from device 0 to each
   other device (``Broadcast.apply`` -> ``comm.broadcast_coalesced``), then the module tree is
   rebuilt N times in Python (``_replicate_for_data_parallel``), every iteration;
3. ``parallel_apply``: one Python thread per replica calls its forward. The Python part of each
   forward (module ``__call__``, argument parsing) holds the GIL, so it runs one thread at a
   time; torch's ops release the GIL while they run, so the kernels of the N devices overlap;
4. ``gather`` (``Gather.apply`` -> ``comm.gather``): the outputs are copied to device 0, where
   the loss is computed;
5. backward: ``Gather``'s backward scatters the output gradient back to the devices, each
   replica's backward runs on its device (the autograd engine's per-device threads, no GIL);
6. the reduction: the replicas' parameters are outputs of ``Broadcast``, whose backward is
   ``ReduceAddCoalesced`` (``comm.reduce_add_coalesced``): it runs once every replica's
   gradient has arrived, and sums them onto the original module's ``.grad`` on device 0;
7. the optimizer steps on device 0 only (the next iteration replicates again).

What it leaves out: CUDA streams' real overlap (copies here never overlap kernels, scatter's
side streams included), NCCL against plain PCIe/peer copies (device 0 sends and receives the
copies one after another at one bandwidth, as ``comm.reduce_add`` does without NCCL; NCCL's
pipelined broadcast and reduce would not grow with N as these do), the GIL's switch interval
(a thread gives the GIL up after each module call's Python; CPython's 5 ms interval and its
convoys are not modelled), the Python of scatter and gather, asynchronous kernel launches on a
GPU (a thread here waits for its kernels), and memory: device 0 holds the gathered outputs, the
loss and the summed gradients (DataParallel's imbalance), which can force a smaller batch;
nothing here runs out of memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import simpy

from ddpsim.sim import network

LABEL = "SIMULATED"  # every figure and table of this model says so


@dataclass(frozen=True)
class DPCosts:
    """The pieces an iteration is made of, learnt from measurements (seconds, bytes)."""

    model: str  # where the pieces come from (a zoo model name)
    batch: int  # samples per iteration, all devices together (DataParallel's input batch)
    forward_fixed_s: float  # one replica's forward at batch 0 (the intercept of the fit), s
    forward_per_sample_s: float  # ... plus this per sample, s/sample
    python_s: float  # the part of one forward that holds the GIL (host-side Python and dispatch), s
    module_calls: int  # module calls in one forward: the GIL is taken and released this often
    backward_fixed_s: float  # one replica's backward at batch 0, s
    backward_per_sample_s: float  # ... plus this per sample, s/sample
    loss_s: float  # the loss on the gathered outputs, s
    optimizer_s: float  # one optimizer step over all parameters, s
    replicate_python_s: float  # rebuilding the module tree for one replica in Python, s
    copy_Bps: float  # device-to-device copy bandwidth, bytes/s
    copy_latency_s: float  # fixed cost of one copy, s
    add_Bps: float  # bytes/s of summing one gradient set into another (reduce_add), bytes/s
    param_bytes: int  # bytes of the parameters (what replicate copies and reduce sums), bytes
    buffer_bytes: int  # bytes of the buffers (replicate copies them too), bytes
    input_bytes_per_sample: int  # bytes/sample of the input that scatter copies
    output_bytes_per_sample: int  # bytes/sample of the output that gather copies
    params: list = field(default_factory=list)  # [(name, bytes)] in definition order (DDP's index)
    ready_order: list = field(default_factory=list)  # param indices in gradient-ready order
    grad_share: list = field(default_factory=list)  # share of the backward before each ready_order entry
    source: str = ""  # how the pieces were measured
    flops_per_sample: float = 0.0  # forward FLOPs per sample (torch's FlopCounterMode), FLOP/sample
    device: str = "this CPU, measured"  # what one simulated device is, in words

    def forward_s(self, samples: int) -> float:
        return self.forward_fixed_s + self.forward_per_sample_s * samples

    def backward_s(self, samples: int) -> float:
        return self.backward_fixed_s + self.backward_per_sample_s * samples

    def copy_s(self, nbytes: float) -> float:
        return self.copy_latency_s + nbytes / self.copy_Bps if nbytes > 0 else 0.0


@dataclass(frozen=True)
class Phase:
    """One span on one device's timeline (seconds from the iteration's start)."""

    device: int
    name: str  # scatter, replicate, forward (Python, GIL), forward (kernels), gather, loss, ...
    start_s: float
    end_s: float


@dataclass
class IterationSim:
    """One simulated iteration of DataParallel or DDP on ``n_devices`` devices."""

    impl: str  # "DataParallel" | "DDP"
    n_devices: int
    phases: list[Phase]
    iteration_s: float
    label: str = LABEL

    def on(self, device: int) -> list[Phase]:
        return sorted((p for p in self.phases if p.device == device), key=lambda p: p.start_s)


def on_gpu(c: DPCosts, gpu: str) -> DPCosts:
    """The GPU case: ``c``'s pieces with kernels and copies from ``gpu``'s profile in
    ``ddpsim/sim/hardware/gpus.json`` (a datasheet estimate, not a measurement).

    Kept from ``c`` (measured on this machine's CPU, as a GPU machine's host would run it): the
    Python share, module calls, replica rebuild, parameters and gradient order. From the profile:
    each module call launches a kernel (``kernel_overhead_us``) in the forward and two in the
    backward; FLOPs run at ``effective_tflops`` (backward twice the forward's); copies at the
    NVLink bandwidth and latency; the reduction's add and the optimizer (SGD with momentum: five
    parameter-sized reads and writes, as ``archs.synthetic``) at the memory bandwidth.
    """
    gpus = network.gpus()
    if gpu not in gpus:
        raise ValueError(f"unknown GPU {gpu!r}: one of {', '.join(gpus)}")
    if c.flops_per_sample <= 0:
        raise ValueError("the GPU case needs the forward's FLOPs per sample (measure_pieces counts them)")
    p = gpus[gpu]
    rate, mem, launch = p["effective_tflops"] * 1e12, p["mem_GBps"] * 1e9, p["kernel_overhead_us"] * 1e-6
    nvlink = network.link_from_profile(p["nvlink"], "nvlink")
    return replace(
        c, forward_fixed_s=c.python_s + c.module_calls * launch, forward_per_sample_s=c.flops_per_sample / rate,
        backward_fixed_s=2 * c.module_calls * launch, backward_per_sample_s=2 * c.flops_per_sample / rate,
        loss_s=launch, optimizer_s=5 * c.param_bytes / mem + len(c.params) * launch,
        copy_Bps=nvlink.bandwidth_Bps, copy_latency_s=nvlink.alpha_s, add_Bps=mem / 3,
        device=f"{p['name']} profile, Python measured here",
        source=f"GPU case: kernels and NVLink copies of {p['name']} from ddpsim/sim/hardware/gpus.json "
               f"(datasheet estimates); the Python share {c.source}")


def chunks(batch: int, n: int) -> list[int]:
    """Samples per device, as ``torch.chunk`` cuts dim 0 (ceil-sized chunks, the last smaller)."""
    size = -(-batch // n)
    out = [min(size, batch - i * size) for i in range(n)]
    return [c for c in out if c > 0]


def simulate_dataparallel(c: DPCosts, n_devices: int) -> IterationSim:
    """One SIMULATED DataParallel iteration of ``c`` on ``n_devices`` devices (see module doc)."""
    if n_devices < 1:
        raise ValueError(f"n_devices must be >= 1, not {n_devices}")
    env = simpy.Environment()
    gil = simpy.Resource(env, capacity=1)
    phases: list[Phase] = []
    env.process(_iteration(env, gil, c, chunks(c.batch, n_devices), phases))
    env.run()
    return IterationSim("DataParallel", len(chunks(c.batch, n_devices)), phases,
                        max(p.end_s for p in phases))


def _span(env, phases, device, name, seconds):
    start = env.now
    yield env.timeout(seconds)
    phases.append(Phase(device, name, start, env.now))


def _copies(env, phases, name, nbytes_per_device, c):
    """Copies between device 0 and devices 1..N-1, one after another on device 0's link."""
    for j, nbytes in enumerate(nbytes_per_device[1:], 1):
        yield from _span(env, phases, j, name, c.copy_s(nbytes))


def _iteration(env, gil, c: DPCosts, per_device: list[int], phases):
    n = len(per_device)
    if n > 1:  # DataParallel with one device calls the module directly (data_parallel.py)
        yield from _copies(env, phases, "scatter", [s * c.input_bytes_per_sample for s in per_device], c)
        yield from _copies(env, phases, "replicate", [c.param_bytes + c.buffer_bytes] * n, c)
        yield from _span(env, phases, 0, "replicate (Python, GIL)", c.replicate_python_s * n)
    threads = [env.process(_replica_forward(env, gil, c, j, s, phases)) for j, s in enumerate(per_device)]
    yield simpy.AllOf(env, threads)
    out_bytes = [s * c.output_bytes_per_sample for s in per_device]
    if n > 1:
        yield from _copies(env, phases, "gather", out_bytes, c)
    yield from _span(env, phases, 0, "loss", c.loss_s)
    if n > 1:
        yield from _copies(env, phases, "scatter grad", out_bytes, c)  # Gather's backward
    yield simpy.AllOf(env, [env.process(_span(env, phases, j, "backward", c.backward_s(s)))
                            for j, s in enumerate(per_device)])
    if n > 1:  # ReduceAddCoalesced: each replica's gradients to device 0, summed there
        for j in range(1, n):
            yield from _span(env, phases, j, "reduce (copy to device 0)", c.copy_s(c.param_bytes))
            yield from _span(env, phases, 0, "reduce (add)", c.param_bytes / c.add_Bps)
    yield from _span(env, phases, 0, "optimizer", c.optimizer_s)


def _replica_forward(env, gil, c: DPCosts, device: int, samples: int, phases):
    """One parallel_apply thread: per module call, its Python under the GIL, then its kernels."""
    calls = max(1, c.module_calls)
    python = c.python_s / calls
    kernels = max(0.0, c.forward_s(samples) - c.python_s) / calls
    for _ in range(calls):
        with gil.request() as turn:
            yield turn
            yield from _span(env, phases, device, "forward (Python, GIL)", python)
        yield from _span(env, phases, device, "forward (kernels)", kernels)
