"""The pieces of a DataParallel iteration, measured here with real torch (one thread, CPU).

``measure_pieces(model, batch)`` times a zoo model's forward and backward at three batch sizes
and fits a line (fixed + per sample) to each; the Python/dispatch share of the forward is the
forward on the ``meta`` device (shapes only, no kernels: what is left is what holds the GIL),
bounded by the forward at one sample; the copy bandwidth and latency are a real ``Tensor.copy_``
(32 MiB and one element), the reduction's add a real ``add_``; the optimizer is torch's SGD with
momentum; the gradient-ready order and each gradient's share of the backward come from
``post_accumulate_grad`` hooks on one real backward. ``dataparallel(model, n)`` feeds them to
the SIMULATED DataParallel and DDP iterations (``ddpsim.sim.dp_compare``).

On this machine the "devices" are hypothetical: each computes as fast as one CPU thread did
here and copies at this machine's memory bandwidth. A GPU's numbers would differ (faster
kernels make the GIL-bound Python a larger share, which is DataParallel's problem on GPUs).
"""
from __future__ import annotations

import functools
import statistics
import time

REPS = 5  # timed repetitions per measurement (the median is kept), after WARMUP
WARMUP = 2  # untimed repetitions first (allocator, lazy init)
COPY_BYTES = 32 * 2**20  # bytes of the copy and add measurements (32 MiB)


def _median_s(fn, reps: int = REPS) -> float:
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _batch(training, samples: int):
    from ddpsim.models import call_batch

    return call_batch(training, 0, 0, 1, samples)


def _fit(training, batches: list[int]) -> tuple[tuple[float, float], tuple[float, float]]:
    """((forward fixed, per sample), (backward fixed, per sample)): least squares on the medians."""
    fwd, bwd = [], []
    for b in batches:
        inputs, target = _batch(training, b)
        holder = {}

        def forward():
            holder["loss"] = training.loss(training.model(*inputs), target)

        def forward_backward():
            forward()
            holder["loss"].backward()
        f = _median_s(forward)
        fwd.append(f)
        bwd.append(max(0.0, _median_s(forward_backward) - f))
    return (tuple(_line(batches, fwd)), tuple(_line(batches, bwd)))


def _line(xs, ys) -> tuple[float, float]:
    slope, intercept = statistics.linear_regression(xs, ys)
    return max(0.0, intercept), max(0.0, slope)


def _meta_forward(model: str, inputs) -> float:
    """The forward on the meta device: module calls and dispatch with no kernel to run."""
    import torch

    from ddpsim.models import build_workload

    torch.manual_seed(0)
    with torch.device("meta"):
        training = build_workload(model)
    inputs = tuple(x.to("meta") if isinstance(x, torch.Tensor) else x for x in inputs)
    return _median_s(lambda: training.model(*inputs))


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
    total = max(times[-1][1] - t0, 1e-12)
    gaps = [(t - prev) / total for (_, t), prev in zip(times, [t0] + [t for _, t in times[:-1]])]
    return [i for i, _ in times], gaps


def _copy_pieces() -> tuple[float, float, float]:
    """(copy bytes/s, copy latency s, add bytes/s): real tensor copies and adds."""
    import torch

    n = COPY_BYTES // 4
    src, dst = torch.ones(n), torch.empty(n)
    bw = COPY_BYTES / _median_s(lambda: dst.copy_(src))
    add = COPY_BYTES / _median_s(lambda: dst.add_(src))
    one, one_dst = torch.ones(1), torch.empty(1)
    return bw, _median_s(lambda: one_dst.copy_(one), reps=50), add


@functools.lru_cache(maxsize=8)
def measure_pieces(model: str = "convnet", batch: int | None = None):
    """The measured ``ddpsim.sim.dataparallel.DPCosts`` of zoo ``model`` at ``batch`` samples per
    iteration (None: the model's default batch); cached per (model, batch) in this process."""
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
    loss_s = _median_s(lambda: training.loss(out.detach(), target))
    order, shares = _ready_shares(training, inputs, target, [p for _, p in params])
    opt = torch.optim.SGD([p for _, p in params], lr=1e-3, momentum=0.9)
    copy_Bps, copy_latency_s, add_Bps = _copy_pieces()
    one_sample = f0 + f1  # the forward at one sample bounds the Python share from above
    return DPCosts(
        model=model, batch=batch, forward_fixed_s=f0, forward_per_sample_s=f1,
        python_s=min(_meta_forward(model, inputs), one_sample), module_calls=_module_calls(training, inputs),
        backward_fixed_s=b0, backward_per_sample_s=b1, loss_s=loss_s, optimizer_s=_median_s(opt.step),
        replicate_python_s=_median_s(lambda: replicate_module_tree(training.model)),
        copy_Bps=copy_Bps, copy_latency_s=copy_latency_s, add_Bps=add_Bps,
        param_bytes=sum(p.numel() * p.element_size() for _, p in params),
        buffer_bytes=sum(b.numel() * b.element_size() for b in training.model.buffers()),
        input_bytes_per_sample=sum(x.numel() * x.element_size() for x in inputs
                                   if isinstance(x, torch.Tensor)) // batch,
        output_bytes_per_sample=out.numel() * out.element_size() // batch,
        params=[(n, p.numel() * p.element_size()) for n, p in params], ready_order=order, grad_share=shares,
        source=f"measured here: torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU")


def dataparallel(model: str = "convnet", n_devices: int = 4, batch: int | None = None):
    """DataParallel beside DDP for zoo ``model`` on ``n_devices`` (SIMULATED from measured pieces):
    a ``ddpsim.sim.dp_compare.Comparison``."""
    from ddpsim.sim.dp_compare import compare

    return compare(measure_pieces(model, batch), n_devices)
