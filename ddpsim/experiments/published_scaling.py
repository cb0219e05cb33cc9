"""Published multi-node DDP scaling tables beside the simulator, with the share spent waiting for stragglers.

As in ``published.py``, the simulator learns one number per table, the effective GPU rate that
gives the published 1-GPU throughput; every multi-GPU row is a prediction from the DDP model, the
hardware profile (NVLink inside a node, the node's NICs between nodes, NCCL's choice of algorithm:
``sim/nccl.py``) and the profile's rank-to-rank spread carried to each world size (Note [Waiting
for the slowest rank] in ``sim/stragglers.py``). ``straggler`` is the share of the predicted
iteration spent waiting for the slowest rank: (time with the spread - time without) / time with.
"""
from __future__ import annotations

from ddpsim.experiments.gpu_rate import as_published, fit_tflops, simulate_src
from ddpsim.sim.api import largest_nccl_choice
from ddpsim.sim.network import gpus

DLE_BERT = ("NVIDIA/DeepLearningExamples PyTorch/LanguageModeling/BERT/README.md (pytorch:21.11-py3, torch DDP with "
            "bucket_cap_mb = the GPU's memory and no_sync over the accumulation steps, run_pretraining.py), "
            "{where}: https://github.com/NVIDIA/DeepLearningExamples/blob/master/PyTorch/LanguageModeling/BERT/README.md")
_BERT_1 = "table 'Pre-training NVIDIA DGX A100 (8x A100 80GB)', row 'GPUs 1', sequence length 128"
_BERT_N = "table 'Pre-training NVIDIA DGX A100 (8x A100 80GB) Multi-node Scaling', sequence length 128, row 'Nodes {n}'"
NERSC = ("sparticlesteve/pytorch-benchmarks (NERSC, commit 2c305b6), notebooks/ScalingAnalysisGPU.ipynb, the output "
         "table of 'results' (torch 1.7.1, NCCL, Cori-GPU: 8 V100-SXM2 per node, 4 EDR HCAs; configs/resnet50.yaml: "
         "batch 128, synthetic data, Adam), row 'ranks {n}', column train_rate (images/s, all ranks): "
         "https://github.com/sparticlesteve/pytorch-benchmarks")
NERSC_RATES = {1: 328.158709, 2: 575.827460, 4: 1073.126200, 8: 2172.150641, 16: 3933.572199, 32: 7791.371154,
               64: 14935.142678}
DLPERF = ("Oneflow-Inc/DLPerf (commit c89430b), PyTorch/resnet50v1.5/README.md (pytorch/examples imagenet main.py: torch "
          "DDP, default buckets; torch 1.6.0, NCCL 2.7.3; 8 V100-SXM2-16GB per node, one EDR NIC per node: "
          "reports/dlperf_benchmark_test_report_v1.md), table 'FP32 & W/O XLA & Use DALI', 'ResNet50 v1.5 batch_size = "
          "128, worker=48' (ImageNet JPEGs decoded on the CPU by DALI), row {row}: https://github.com/Oneflow-Inc/DLPerf")
DLPERF_RATES = {(1, 1): 350.66, (1, 4): 1306.49, (1, 8): 2707.42, (2, 8): 5193.09, (4, 8): 10032.72}
RAY = ("ray-project/ray (commit 0767154), python/ray/util/sgd/torch/examples/benchmarks/README.rst (RaySGD wrapping torch "
       "DDP, torch 1.4.0; ResNet-50, batch 128 per GPU, synthetic data on the GPU; AWS p3dn.24xlarge: 8 V100-SXM2 "
       "per node, 100 Gb/s Ethernet), {where}: https://github.com/ray-project/ray")
RAY_1 = "table 'Single Node Results', row 'Number of GPUs 1', column '{col}'"
RAY_N = "table 'Multi Node Results', row '{n} * 8', column '{col}'"
RAY_RATES = {"Ray (PyTorch)": (356.0, {1: 2962.7, 2: 5886.1, 4: 11705.9, 8: 23317.9}),
             "Ray (PyTorch) + Apex": (770.0, {1: 6172.0, 2: 10052.8, 4: 20319.5, 8: 38642.0})}
ITERS = 3  # synced steps: the first (one bucket), the rebuild, a steady one; deterministic (expected noise)
GPU_MEMORY_MB = 81920  # DDP(bucket_cap_mb=torch.cuda.get_device_properties(device).total_memory) on an 80 GB A100: one bucket


def _bert(prec: str, batch: int, one_gpu: float, acc1: int, rows: dict) -> dict:
    col = "Throughput - TF32" if prec == "TF32" else "Throughput - mixed precision"
    return {"name": f"NVIDIA DLE BERT-large phase 1, DGX A100 80GB, {prec}", "arch": "bert-large", "gpu": "a100",
            "net": "ib200", "batch": batch, "unit": "seq/s", "bucket_cap_mb": GPU_MEMORY_MB, "torch": "1.11.0a0",
            "cite": DLE_BERT.format(where=f"{_BERT_1} and {_BERT_N.format(n='1..32')}, columns '{prec}'"),
            "baseline": (1, one_gpu, acc1, DLE_BERT.format(where=f"{_BERT_1}, column '{col}(sequences/sec)'")),
            "targets": [(8 * n, pub, acc, DLE_BERT.format(where=_BERT_N.format(n=n))) for n, (pub, acc) in rows.items()]}


SOURCES = [
    # TF32: batch 128 per GPU (the multi-node table prints 126; its accumulated 8192 / 64 steps is 128)
    _bert("TF32", 128, 317.0, 64, {1: (2486.0, 64), 2: (4979.0, 32), 4: (9859.0, 16), 8: (19815.0, 8),
                                   16: (38866.0, 4), 32: (75706.0, 2)}),
    # mixed precision: batch 256; at 4 nodes the table prints 18 accumulation steps, its 2048 / 256 is 8
    _bert("mixed precision", 256, 580.0, 32, {1: (4553.0, 32), 2: (9191.0, 16), 4: (18119.0, 8), 8: (35774.0, 4),
                                              16: (70555.0, 2), 32: (138294.0, 1)}),
    {"name": "NERSC Cori-GPU ResNet-50 b128, torch 1.7.1", "arch": "resnet50", "gpu": "v100", "net": "ib100",
     "batch": 128, "unit": "img/s", "bucket_cap_mb": None, "torch": "1.7.1", "cite": NERSC.format(n="1..64"),
     "baseline": (1, NERSC_RATES[1], 1, NERSC.format(n=1)),
     "targets": [(n, r, 1, NERSC.format(n=n)) for n, r in NERSC_RATES.items() if n > 1]},
]


def _resnet(name: str, net: str, torch: str, cite: str, baseline: tuple, targets: list) -> dict:
    return {"name": name, "arch": "resnet50", "gpu": "v100", "net": net, "batch": 128, "unit": "img/s",
            "bucket_cap_mb": None, "torch": torch, "cite": cite, "baseline": baseline, "targets": targets}


def _dlperf() -> dict:
    row = "node_num {} gpu_num_per_node {}"
    rows = [(n * g, r, 1, DLPERF.format(row=row.format(n, g))) for (n, g), r in DLPERF_RATES.items()]
    return _resnet("DLPerf ResNet-50 b128 FP32, torch 1.6, DALI", "ib100x1", "1.6.0", DLPERF.format(row="1..4 nodes"),
                   rows[0], rows[1:])


def _ray(col: str) -> dict:
    one, rates = RAY_RATES[col]
    prec = "Apex O1" if "Apex" in col else "FP32"
    return _resnet(f"RaySGD ResNet-50 b128 {prec}, torch 1.4, p3dn", "eth100", "1.4.0",
                   RAY.format(where=f"{RAY_1.format(col=col)} and {RAY_N.format(n='1..8', col=col)}"),
                   (1, one, 1, RAY.format(where=RAY_1.format(col=col))),
                   [(8 * n, r, 1, RAY.format(where=RAY_N.format(n=n, col=col))) for n, r in rates.items()])


SOURCES += [_dlperf(), _ray("Ray (PyTorch)"), _ray("Ray (PyTorch) + Apex")]


def config(src: dict, accumulation: int, jitter: float) -> dict:
    return {"no_sync_every": accumulation, "bucket_cap_mb": src["bucket_cap_mb"], "jitter": jitter,
            "jitter_mode": "expected", "iters": ITERS}


def predict(src: dict, tflops: float, ws: int, acc: int, spread: float) -> dict:
    """Predicted throughput at ``ws`` GPUs, the straggler share, and NCCL's choice for the largest bucket."""
    noisy = simulate_src(src, tflops, ws, src["net"], **config(src, acc, spread))
    quiet = simulate_src(src, tflops, ws, src["net"], **config(src, acc, 0.0))
    t, t0 = noisy["iteration_time_s"], quiet["iteration_time_s"]
    return {"predicted": as_published(src, t, ws), "straggler": (t - t0) / t if t > 0 else 0.0,
            "nccl": largest_nccl_choice(noisy) or "-"}


def reproduce(src: dict) -> list[dict]:
    spread = float(gpus()[src["gpu"]].get("rank_spread", 0.0))
    ws1, value, acc1, where = src["baseline"]
    tflops = fit_tflops(src, net=src["net"], **config(src, acc1, spread))
    rows = []
    for role, (ws, pub, acc, w) in [("baseline (fitted)", src["baseline"])] + [("prediction", t) for t in src["targets"]]:
        r = {"source": src["name"], "gpus": ws, "accumulation": acc, "published": pub, "role": role, "where": w,
             "unit": src["unit"], "fitted_tflops": tflops, "rank_spread": spread, "torch": src.get("torch")}
        r.update(predict(src, tflops, ws, acc, spread))
        r["rel_error"] = (r["predicted"] - pub) / pub
        rows.append(r)
    return rows


def run() -> list[dict]:
    return [r for src in SOURCES for r in reproduce(src)]


def table(rows: list[dict]) -> str:
    head = (f"{'source':62} {'GPUs':>4} {'nodes':>5} {'accum':>5} {'published':>10} {'predicted':>10} {'error':>7} "
            f"{'straggler':>9}  NCCL (largest bucket)")
    lines = [head, "-" * len(head)]
    for r in rows:
        err = "(fit)" if r["role"].startswith("baseline") else f"{r['rel_error'] * 100:+.1f}%"
        nodes = -(-r["gpus"] // 8)
        lines.append(f"{r['source']:62} {r['gpus']:>4} {nodes:>5} {r['accumulation']:>5} {r['published']:>10.0f} "
                     f"{r['predicted']:>10.0f} {err:>7} {r['straggler'] * 100:>8.2f}%  {r['nccl']}")
    return "\n".join(lines)
