"""Parameter tables of published architectures, built here (no torchvision / transformers).

Each table lists the parameters in definition order (DDP's index order) with the
forward FLOPs per sample of the layer the parameter belongs to (attributed to its
weight) and, for memory-bound layers, activation elements per sample:

- ``resnet50``: He et al. 2016, torchvision layout (v1.5: stride on the 3x3 conv),
  224x224 input. 161 tensors, 25,557,032 parameters, ~8.2 GFLOPs/sample forward.
- ``bert-large``: Devlin et al. 2019, 24 layers, d=1024, 16 heads, FFN 4096,
  vocab 30522, 512 positions, with pooler; sequence 128. 391 tensors, ~335M params
  (the paper's "340M").
- ``gpt2``: Radford et al. 2019 (small), 12 layers, d=768, vocab 50257, 1024
  positions, lm_head tied to wte (counted once); sequence 1024. 148 tensors, 124.4M.

:func:`synthetic` turns a table into a :class:`Workload` for a GPU profile: the
backward compute before each gradient is ``2 x forward FLOPs / effective rate +
2 x activation bytes / memory bandwidth + a per-kernel overhead``; gradients become
ready in reverse definition order (bias before weight, as observed in torch), and
a tied embedding becomes ready last, with its lm_head matmul spent at the start of
backward.
"""
from __future__ import annotations

from ddpsim.sim import network
from ddpsim.sim.comm_hooks import gpu_rates
from ddpsim.sim.workload import ParamSpec, Workload

ARCHS = ("resnet50", "bert-large", "gpt2")
DEFAULT_BATCH = {"resnet50": 32, "bert-large": 32, "gpt2": 8}


def _p(name, shape, flops=0.0, act=0.0):
    n = 1
    for s in shape:
        n *= s
    return {"name": name, "shape": list(shape), "numel": n, "flops": float(flops), "act": float(act)}


def resnet50() -> tuple[list[dict], float]:
    t = []

    def conv(name, cin, cout, k, hw_out):
        t.append(_p(f"{name}.weight", (cout, cin, k, k), 2.0 * hw_out * hw_out * cout * cin * k * k))

    def bn(name, c, hw):
        t.append(_p(f"{name}.weight", (c,), 0, 4.0 * c * hw * hw))
        t.append(_p(f"{name}.bias", (c,)))

    conv("conv1", 3, 64, 7, 112)
    bn("bn1", 64, 112)
    cin, hw = 64, 56
    for li, (blocks, width, stride) in enumerate([(3, 64, 1), (4, 128, 2), (6, 256, 2), (3, 512, 2)], 1):
        for b in range(blocks):
            s = stride if b == 0 else 1
            hw_out = hw // s
            pre = f"layer{li}.{b}"
            conv(f"{pre}.conv1", cin, width, 1, hw)
            bn(f"{pre}.bn1", width, hw)
            conv(f"{pre}.conv2", width, width, 3, hw_out)
            bn(f"{pre}.bn2", width, hw_out)
            conv(f"{pre}.conv3", width, width * 4, 1, hw_out)
            bn(f"{pre}.bn3", width * 4, hw_out)
            if b == 0:
                conv(f"{pre}.downsample.0", cin, width * 4, 1, hw_out)
                bn(f"{pre}.downsample.1", width * 4, hw_out)
            cin, hw = width * 4, hw_out
    t.append(_p("fc.weight", (1000, 2048), 2.0 * 2048 * 1000))
    t.append(_p("fc.bias", (1000,)))
    return t, 0.0


def _linear(t, name, din, dout, tokens, bias=True, extra=0.0):
    t.append(_p(f"{name}.weight", (dout, din), 2.0 * tokens * din * dout + extra))
    if bias:
        t.append(_p(f"{name}.bias", (dout,)))


def _ln(t, name, d, tokens):
    t.append(_p(f"{name}.weight", (d,), 0, 4.0 * tokens * d))
    t.append(_p(f"{name}.bias", (d,)))


def bert_large(seq: int = 128) -> tuple[list[dict], float]:
    d, ff, L, V = 1024, 4096, 24, 30522
    t = [_p("embeddings.word_embeddings.weight", (V, d), 0, 2.0 * V * d),
         _p("embeddings.position_embeddings.weight", (512, d)),
         _p("embeddings.token_type_embeddings.weight", (2, d))]
    _ln(t, "embeddings.LayerNorm", d, seq)
    attn_core = 2 * 2.0 * seq * seq * d  # QK^T and AV
    for i in range(L):
        pre = f"encoder.layer.{i}"
        _linear(t, f"{pre}.attention.self.query", d, d, seq)
        _linear(t, f"{pre}.attention.self.key", d, d, seq)
        _linear(t, f"{pre}.attention.self.value", d, d, seq, extra=attn_core)
        _linear(t, f"{pre}.attention.output.dense", d, d, seq)
        _ln(t, f"{pre}.attention.output.LayerNorm", d, seq)
        _linear(t, f"{pre}.intermediate.dense", d, ff, seq)
        _linear(t, f"{pre}.output.dense", ff, d, seq)
        _ln(t, f"{pre}.output.LayerNorm", d, seq)
    _linear(t, "pooler.dense", d, d, 1)
    return t, 0.0


def gpt2(seq: int = 1024) -> tuple[list[dict], float]:
    d, L, V = 768, 12, 50257
    t = [_p("wte.weight", (V, d), 0, 2.0 * V * d), _p("wpe.weight", (1024, d))]
    attn_core = 2 * 2.0 * seq * seq * d / 2  # causal: about half
    for i in range(L):
        pre = f"h.{i}"
        _ln(t, f"{pre}.ln_1", d, seq)
        _linear(t, f"{pre}.attn.c_attn", d, 3 * d, seq, extra=attn_core)
        _linear(t, f"{pre}.attn.c_proj", d, d, seq)
        _ln(t, f"{pre}.ln_2", d, seq)
        _linear(t, f"{pre}.mlp.c_fc", d, 4 * d, seq)
        _linear(t, f"{pre}.mlp.c_proj", 4 * d, d, seq)
    _ln(t, "ln_f", d, seq)
    head = 2.0 * seq * d * V  # tied lm_head, run at the start of backward
    return t, head


def batchnorm_buffer_bytes(rows: list[dict]) -> int:
    """Bytes of the BatchNorm buffers, which DDP broadcasts from rank 0 before each forward (``broadcast_buffers``,
    torch's default True): ``running_mean`` and ``running_var`` (float32, a channel each) and
    ``num_batches_tracked`` (int64) per layer. ResNet-50: 53 layers, 212,904 bytes, as torchvision's model's
    ``buffers()`` (``ddpsim.models.resnet``); LayerNorm (BERT, GPT-2) has none."""
    norms = [r for r in rows if r["name"].endswith(".weight")
             and (r["name"].split(".")[-2].startswith("bn") or r["name"].endswith("downsample.1.weight"))]
    return sum(2 * 4 * r["numel"] + 8 for r in norms)


def table(arch: str) -> tuple[list[dict], float]:
    """(param rows in definition order, extra backward FLOPs/sample before the first grad)."""
    builders = {"resnet50": resnet50, "bert-large": bert_large, "gpt2": gpt2}
    key = arch.lower().replace("_", "-")
    if key == "bert":
        key = "bert-large"
    if key not in builders:
        raise ValueError(f"unknown arch {arch!r}: choose one of {', '.join(ARCHS)}")
    return builders[key]()


def synthetic(arch: str, hardware: str = "a100-nvlink", batch: int | None = None,
              tflops: float | None = None, bytes_per_grad: int = 4) -> Workload:
    """A Workload for ``arch`` on ``hardware`` (``gpu-network``, e.g. ``h100-ib400``).

    Gradients are float32 (``bytes_per_grad``), as with AMP's fp32 master grads.
    The link is resolved per world size at simulation time (``meta['hardware']``).
    """
    rows, head_flops = table(arch)
    gpu, _ = network.parse_hardware(hardware)
    batch = batch or DEFAULT_BATCH.get(arch.lower(), 32)
    if batch < 1:
        raise ValueError(f"batch must be >= 1, not {batch}")
    rate = (tflops or gpu["effective_tflops"]) * 1e12
    network.check_positive(rate, "tflops")
    mem = gpu["mem_GBps"] * 1e9
    overhead = gpu["kernel_overhead_us"] * 1e-6
    params = [ParamSpec(i, r["name"], r["numel"] * bytes_per_grad, "float32", r["shape"])
              for i, r in enumerate(rows)]
    fwd = [batch * r["flops"] / rate + batch * r["act"] * 4 / mem + (overhead if r["flops"] or r["act"] else 0)
           for r in rows]
    order = list(range(len(rows) - 1, -1, -1))  # a tied embedding (index 0) is ready last
    bwd = [2 * fwd[i] for i in order]
    bwd[0] += 2 * batch * head_flops / rate
    n_elems = sum(r["numel"] for r in rows)
    forward = sum(fwd) + batch * head_flops / rate
    return Workload(
        name=f"{arch}@{hardware}", params=params, ready_order=order, grad_compute_s=bwd,
        link=network.network_for(hardware, 8), forward_s=forward, pre_backward_s=50e-6,
        graph_search_s=len(rows) * 2e-6, finalize_s=2 * n_elems * bytes_per_grad / mem + 20e-6,
        step_gap_s=20e-6, optimizer_s=20 * n_elems / mem + len(rows) * overhead, iter_gap_s=0.0,
        buffer_bytes=batchnorm_buffer_bytes(rows),
        meta={"kind": "synthetic", "arch": arch, "hardware": hardware, "batch": batch,
              "effective_tflops": rate / 1e12, "gpu": gpu["name"],
              "rank_spread": float(gpu.get("rank_spread", 0.0))},  # Note [Waiting for the slowest rank]
    )


def arch_defaults(workload, comm_hook=None, powersgd_rank: int | None = None) -> dict:
    """The SimConfig fields a GPU model (``synthetic``) runs with unless told otherwise, as ``simulate
    --arch``, ``sweep --arch`` and the bundled simulated samples take them: its profile's rank spread, every
    rank waiting for the expected slowest (Note [Waiting for the slowest rank]); with a comm hook, its
    compute at the GPU's rates."""
    gpu = str(workload.meta.get("hardware", "")).partition("-")[0]
    rates = {"hook_rates": gpu_rates(gpu, powersgd_rank or 1)} if comm_hook else {}
    noise = {"jitter": workload.meta["rank_spread"], "jitter_mode": "expected"} if "rank_spread" in workload.meta else {}
    return {**rates, **noise}
