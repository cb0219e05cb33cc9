"""``python -m ddpsim published``: published GPU DDP measurements beside the simulator's predictions.

Each source below is a table someone else measured (cited to the file, table and row). The
simulator learns only the source's own baseline: the effective GPU rate (TFLOP/s) at which the
synthetic architecture (``sim.archs``) at 1 GPU takes the published 1-GPU step time (bisection).
Everything else comes from the hardware profiles (``sim/hardware/*.json``: NVLink inside a node,
the fabric between nodes, ``network_for``) and the DDP model (25 MiB buckets, overlap). The
multi-GPU step (or throughput) it then predicts is compared with the published one:
``error = (predicted - published) / published``. docs/reproductions.md holds the table.
"""
from __future__ import annotations

import json
import math
import statistics

HELP = "reproduce published GPU DDP measurements (PyTorch DDP benchmark, NVIDIA DeepLearningExamples)"

PT_DDP = ("pytorch/pytorch benchmarks/distributed/ddp/README.md, table 'Benchmark: resnet50 with batch size 32' "
          "(p50 sec/iter; PyTorch 1.4.0a0, CUDA 10.0, NCCL; DGX-1 V100 machines, 4x 100Gb InfiniBand per "
          "machine): https://github.com/pytorch/pytorch/blob/main/benchmarks/distributed/ddp/README.md")
DLE = ("NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/resnet50v1.5/README.md, section "
       "'Training performance results' (pytorch-21.03 NGC container, torch DDP), table '{table}', column "
       "'Throughput - {prec}'; per-GPU batch {batch} from PyTorch/Classification/ConvNets/configs.yml "
       "(models.resnet50.{platform}.{prec}.batch_size): https://github.com/NVIDIA/DeepLearningExamples/blob/"
       "master/PyTorch/Classification/ConvNets/resnet50v1.5/README.md")

# What each source published. unit "s": seconds per iteration per GPU; "img/s": images/s, all GPUs.
SOURCES = [
    {"name": "PyTorch DDP benchmark, ResNet-50, V100", "arch": "resnet50", "batch": 32, "gpu": "v100",
     "unit": "s", "cite": PT_DDP,
     "baseline": (1, 0.100, "row '1 GPUs -- 1M/1G: p50: 0.100s'"),
     "targets": [(2, "nvlink", 0.103, "row '2 GPUs -- 1M/2G: p50: 0.103s'"),
                 (4, "nvlink", 0.103, "row '4 GPUs -- 1M/4G: p50: 0.103s'"),
                 (8, "nvlink", 0.104, "row '8 GPUs -- 1M/8G: p50: 0.104s'"),
                 (16, "ib100", 0.104, "row '16 GPUs -- 2M/8G: p50: 0.104s' (2 machines)")]},
    {"name": "NVIDIA DLE ResNet-50 v1.5, DGX A100 TF32", "arch": "resnet50", "batch": 256, "gpu": "a100",
     "unit": "img/s", "cite": DLE.format(table="Training performance: NVIDIA DGX A100 (8x A100 80GB)",
                                         prec="TF32", batch=256, platform="DGXA100"),
     "baseline": (1, 938.0, "row 'GPUs 1': 938 img/s"),
     "targets": [(8, "nvlink", 7248.0, "row 'GPUs 8': 7248 img/s (7.72x)")]},
    {"name": "NVIDIA DLE ResNet-50 v1.5, DGX-1 V100 16GB FP32", "arch": "resnet50", "batch": 112, "gpu": "v100",
     "unit": "img/s", "cite": DLE.format(table="Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)",
                                         prec="FP32", batch=112, platform="DGX1V"),
     "baseline": (1, 367.0, "row 'GPUs 1': 367 img/s"),
     "targets": [(8, "nvlink", 2855.0, "row 'GPUs 8': 2855 img/s (7.76x)")]},
]
ITERS = 6  # synced steps simulated per prediction
FIT_STEPS = 60  # bisection steps on log(TFLOP/s): far below 0.1% of the baseline


def step_time(src: dict, tflops: float, world_size: int, net: str = "nvlink") -> float:
    """Simulated seconds per iteration of ``src``'s model at ``tflops`` on ``world_size`` GPUs."""
    from ddpsim.sim.api import SimConfig, simulate
    from ddpsim.sim.archs import synthetic

    w = synthetic(src["arch"], f"{src['gpu']}-{net}", batch=src["batch"], tflops=tflops)
    _, summary = simulate(w, SimConfig(world_size=world_size, iters=ITERS))
    return summary["iteration_time_s"]


def as_step(src: dict, value: float, world_size: int) -> float:
    """A published value as seconds per iteration."""
    return value if src["unit"] == "s" else src["batch"] * world_size / value


def as_published(src: dict, step_s: float, world_size: int) -> float:
    return step_s if src["unit"] == "s" else src["batch"] * world_size / step_s


def fit_tflops(src: dict) -> float:
    """The effective TFLOP/s at which the simulated 1-GPU step equals the published baseline."""
    ws, value, _ = src["baseline"]
    want = as_step(src, value, ws)
    lo, hi = math.log(1e-3), math.log(1e4)
    if not step_time(src, math.exp(hi), ws) < want < step_time(src, math.exp(lo), ws):
        raise ValueError(f"{src['name']}: no GPU rate gives the published {value} {src['unit']}")
    for _ in range(FIT_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step_time(src, math.exp(mid), ws) > want else (lo, mid)
    return math.exp((lo + hi) / 2)


def reproduce(src: dict) -> list[dict]:
    """Rows for one source: the baseline (fitted) and each target (predicted)."""
    tflops = fit_tflops(src)
    ws, value, where = src["baseline"]
    rows = [{"source": src["name"], "world_size": ws, "network": "-", "role": "baseline (fitted)",
             "published": value, "where": where}]
    rows += [{"source": src["name"], "world_size": n, "network": net, "role": "prediction",
              "published": pub, "where": w} for n, net, pub, w in src["targets"]]
    for r in rows:
        net = r["network"] if r["network"] != "-" else "nvlink"
        r["predicted"] = as_published(src, step_time(src, tflops, r["world_size"], net), r["world_size"])
        r["rel_error"] = (r["predicted"] - r["published"]) / r["published"]
        r.update(unit=src["unit"], fitted_tflops=tflops, gpu=src["gpu"], batch=src["batch"])
    return rows


def run() -> tuple[list[dict], list[str]]:
    rows, cites = [], []
    for src in SOURCES:
        rows += reproduce(src)
        cites.append(f"{src['name']}: {src['cite']}")
    return rows, cites


def table(rows: list[dict]) -> str:
    head = f"{'source':48} {'GPUs':>4} {'network':>7} {'published':>10} {'predicted':>10} {'error':>7}  role"
    lines = [head, "-" * len(head)]
    for r in rows:
        fmt = "{:.3f} s" if r["unit"] == "s" else "{:.0f}/s"
        lines.append(f"{r['source']:48} {r['world_size']:>4} {r['network']:>7} {fmt.format(r['published']):>10} "
                     f"{fmt.format(r['predicted']):>10} {r['rel_error'] * 100:>+6.1f}%  {r['role']}")
    return "\n".join(lines)


def add_arguments(p) -> None:
    p.add_argument("--json", help="also write the rows and citations to this JSON file")


def main(args) -> int:
    rows, cites = run()
    print(table(rows))
    print("\nSources:")
    for c in cites:
        print(f"- {c}")
    if getattr(args, "json", None):
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "sources": cites}, f, indent=1)
    preds = [abs(r["rel_error"]) for r in rows if r["role"] == "prediction"]
    print(json.dumps({"predictions": len(preds), "median_abs_error": statistics.median(preds),
                      "max_abs_error": max(preds)}, separators=(",", ":")))
    return 0
