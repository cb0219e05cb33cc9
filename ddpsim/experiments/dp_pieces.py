"""The pieces of a DataParallel iteration, measured here with real torch (one thread, CPU).

``measure_pieces(model, batch)`` times a zoo model's forward and backward at three batch sizes
and fits a line (fixed + per sample) to each; the Python/dispatch share of the forward (what
holds the GIL) is the fitted forward at one sample, an upper bound (Note [The Python share]); the
copy bandwidth and latency are a real ``Tensor.copy_``
(32 MiB and one element), the reduction's add a real ``add_``; the optimizer is torch's SGD with
momentum; the gradient-ready order and each gradient's share of the backward come from
``post_accumulate_grad`` hooks on one real backward. ``dataparallel(model, n)`` feeds them to
the SIMULATED DataParallel and DDP iterations (``ddpsim.sim.dp_compare``).

    python -m ddpsim.experiments.dp_pieces    # the tables of docs/dataparallel.md

On this machine the "devices" are hypothetical: each computes as fast as one CPU thread did
here and copies at this machine's memory bandwidth. ``dataparallel(..., gpu="h100")`` takes the
kernels and copies from a GPU profile instead (``ddpsim.sim.dataparallel.on_gpu``).

Note [The Python share]: the part of a forward that holds the GIL is its Python (module calls,
argument parsing); torch's ops release the GIL while they dispatch and run. The forward at one
sample is that plus one sample's kernels, so it bounds the share from above. The forward on the
``meta`` device (no kernels) looked like a tighter bound but is not: its meta kernels are largely
Python (torch/_meta_registrations.py, decompositions), and it took 10 to 15 times the one-sample
forward here (convnet 11.6 against 0.75 ms, mlp 1.9 against 0.28, transformer 9.3 against 0.72).
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time

from ddpsim.record.probe import timings

REPS = 7  # timed repetitions per measurement, after WARMUP; the fastest is kept (see _fastest_s)
WARMUP = 2  # untimed repetitions first (allocator, lazy init)
COPY_BYTES = 32 * 2**20  # bytes of the copy and add measurements (32 MiB)


def _fastest_s(fn, reps: int = REPS) -> float:
    """The fastest of ``reps`` timed calls: on a shared machine the one least slowed by others."""
    return min(timings(fn, reps, WARMUP))


def _batch(training, samples: int):
    from ddpsim.models import call_batch

    return call_batch(training, 0, 0, 1, samples)


def _fit(training, batches: list[int]) -> tuple[tuple[float, float], tuple[float, float]]:
    """((forward fixed, per sample), (backward fixed, per sample)): least squares on the fastest times."""
    fwd, bwd = [], []
    for b in batches:
        inputs, target = _batch(training, b)

        def forward_backward():
            training.loss(training.model(*inputs), target).backward()
        f = _fastest_s(lambda: training.model(*inputs))
        fwd.append(f)
        bwd.append(max(0.0, _fastest_s(forward_backward) - f))  # the loss (microseconds) goes with it
    return (tuple(_line(batches, fwd)), tuple(_line(batches, bwd)))


def _line(xs, ys) -> tuple[float, float]:
    slope, intercept = statistics.linear_regression(xs, ys)
    return max(0.0, intercept), max(0.0, slope)


def _module_calls(training, inputs) -> int:
    count = [0]
    hooks = [m.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
             for m in training.model.modules()]
    try:
        training.model(*inputs)
    finally:
        for h in hooks:
            h.remove()
    return count[0]


def _flops_per_sample(training, inputs, batch: int) -> float:
    """The forward's FLOPs per sample, as torch's FlopCounterMode counts them (matmuls, convolutions)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        training.model(*inputs)
    return counter.get_total_flops() / batch


def _ready_shares(training, inputs, target, params) -> tuple[list[int], list[float]]:
    """Gradient-ready order and each gradient's share of the backward, from one real backward."""
    times: list[tuple[int, float]] = []
    hooks = [p.register_post_accumulate_grad_hook(lambda _p, i=i: times.append((i, time.perf_counter())))
             for i, p in enumerate(params)]
    try:
        loss = training.loss(training.model(*inputs), target)
        t0 = time.perf_counter()
        loss.backward()
    finally:
        for h in hooks:
            h.remove()
    if sorted(i for i, _ in times) != list(range(len(params))):
        raise ValueError("some parameters got no gradient in one backward: a model with unused parameters "
                         "(find_unused_parameters) is not one DataParallel's lesson can time")
    total = max(times[-1][1] - t0, 1e-12)
    gaps = [(t - prev) / total for (_, t), prev in zip(times, [t0] + [t for _, t in times[:-1]])]
    return [i for i, _ in times], gaps


def _copy_pieces() -> tuple[float, float, float]:
    """(copy bytes/s, copy latency s, add bytes/s): real tensor copies and adds."""
    import torch

    n = COPY_BYTES // 4
    src, dst = torch.ones(n), torch.empty(n)
    bw = COPY_BYTES / _fastest_s(lambda: dst.copy_(src))
    add = COPY_BYTES / _fastest_s(lambda: dst.add_(src))
    one, one_dst = torch.ones(1), torch.empty(1)
    return bw, _fastest_s(lambda: one_dst.copy_(one), reps=50), add


@functools.lru_cache(maxsize=8)
def measure_pieces(model: str = "convnet", batch: int | None = None):
    """The measured ``ddpsim.sim.dataparallel.DPCosts`` of zoo ``model`` at ``batch`` samples per
    iteration (None: the model's default batch); cached per (model, batch) in this process.

    Measured on one torch thread (one simulated device is one thread), whatever the caller set;
    the caller's thread count is restored afterwards. (Left at 2 threads on this busy 2-core
    machine, a Streamlit script thread measured the convnet's forward 80 times slower.)"""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _measure(model, batch)
    finally:
        torch.set_num_threads(threads)


def _measure(model: str, batch: int | None):
    import torch

    from ddpsim.models import build_workload
    from ddpsim.sim.dataparallel import DPCosts
    from ddpsim.torchcompat import replicate_module_tree

    torch.manual_seed(0)
    training = build_workload(model)
    batch = batch or training.default_batch_size
    if batch < 1:
        raise ValueError(f"batch must be >= 1, not {batch}")
    inputs, target = _batch(training, batch)
    params = [(n, p) for n, p in training.model.named_parameters() if p.requires_grad]
    (f0, f1), (b0, b1) = _fit(training, sorted({1, max(1, batch // 2), batch}))
    out = training.model(*inputs)
    loss_s = _fastest_s(lambda: training.loss(out.detach(), target))
    order, shares = _ready_shares(training, inputs, target, [p for _, p in params])
    opt = torch.optim.SGD([p for _, p in params], lr=1e-3, momentum=0.9)
    copy_Bps, copy_latency_s, add_Bps = _copy_pieces()
    return DPCosts(
        model=model, batch=batch, forward_fixed_s=f0, forward_per_sample_s=f1,
        python_s=f0 + f1, module_calls=_module_calls(training, inputs),  # Note [The Python share]
        backward_fixed_s=b0, backward_per_sample_s=b1, loss_s=loss_s, optimizer_s=_fastest_s(opt.step),
        replicate_python_s=_fastest_s(lambda: replicate_module_tree(training.model)),
        copy_Bps=copy_Bps, copy_latency_s=copy_latency_s, add_Bps=add_Bps,
        param_bytes=sum(p.numel() * p.element_size() for _, p in params),
        buffer_bytes=sum(b.numel() * b.element_size() for b in training.model.buffers()),
        input_bytes_per_sample=sum(x.numel() * x.element_size() for x in inputs
                                   if isinstance(x, torch.Tensor)) // batch,
        output_bytes_per_sample=out.numel() * out.element_size() // batch,
        params=[(n, p.numel() * p.element_size()) for n, p in params], ready_order=order, grad_share=shares,
        source=f"measured here: torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU",
        flops_per_sample=_flops_per_sample(training, inputs, batch))


def dataparallel(model: str = "convnet", n_devices: int = 4, batch: int | None = None, gpu: str | None = None):
    """DataParallel beside DDP for zoo ``model`` on ``n_devices`` (SIMULATED from measured pieces):
    a ``ddpsim.sim.dp_compare.Comparison``. ``gpu``: a GPU profile's kernels and copies instead of
    this machine's (``ddpsim.sim.dataparallel.on_gpu``); None: the pieces as measured here."""
    from ddpsim.sim.dataparallel import on_gpu
    from ddpsim.sim.dp_compare import compare

    pieces = measure_pieces(model, batch)
    return compare(pieces if gpu is None else on_gpu(pieces, gpu), n_devices)


MODELS = ("convnet", "mlp", "transformer")  # the zoo models of docs/dataparallel.md's tables
TABLE_DEVICES = (1, 2, 4, 8)  # device counts in the times table


def pieces_row(c) -> str:
    ms = 1e3
    return (f"| {c.model} | {c.batch} | {c.forward_fixed_s * ms:.3f} + {c.forward_per_sample_s * ms:.3f} | "
            f"{c.python_s * ms:.3f} | {c.module_calls} | {c.backward_fixed_s * ms:.3f} + "
            f"{c.backward_per_sample_s * ms:.3f} | {c.optimizer_s * ms:.3f} | {c.replicate_python_s * ms:.3f} | "
            f"{c.param_bytes / 1e6:.2f} | {c.copy_Bps / 1e9:.1f} | {c.add_Bps / 1e9:.1f} |")


def times_rows(comparisons) -> list[str]:
    rows = []
    for c in comparisons:
        for n, dp, ddp in (row for row in c.scaling if row[0] in TABLE_DEVICES):
            rows.append(f"| {c.costs.model} | {c.costs.device} | {n} | {dp * 1e3:.2f} | {ddp * 1e3:.2f} | "
                        f"{dp / ddp:.2f}x |")
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The measured pieces and the SIMULATED DataParallel and DDP "
                                            "iteration times of zoo models (docs/dataparallel.md)")
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated (default {','.join(MODELS)})")
    p.add_argument("--gpu", default="h100", help="also the GPU case on this profile of gpus.json "
                                                  "(default h100; '' for none)")
    args = p.parse_args(argv)
    import torch

    from ddpsim.sim.dataparallel import on_gpu
    from ddpsim.sim.dp_compare import compare

    torch.set_num_threads(1)
    pieces = [measure_pieces(m) for m in args.models.split(",") if m]
    print("| model | batch | forward fixed + per sample (ms) | Python share (ms) | module calls | backward fixed "
          "+ per sample (ms) | optimizer (ms) | replica rebuild (ms) | params (MB) | copy (GB/s) | add (GB/s) |")
    print("|---" * 11 + "|")
    for c in pieces:
        print(pieces_row(c))
    cases = [compare(c, 2) for c in pieces] + ([compare(on_gpu(c, args.gpu), 2) for c in pieces] if args.gpu else [])
    print("\n| model | each device | devices | DataParallel (ms, SIMULATED) | DDP (ms, SIMULATED) | DDP speed-up |")
    print("|---" * 6 + "|")
    print("\n".join(times_rows(cases)))
    print(f"\n{pieces[0].source}" if pieces else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
