"""``python -m ddpsim published``: published GPU DDP measurements beside the simulator's predictions.

Each source below is a table someone else measured (cited to the file, table and row). The
simulator learns only the source's own baseline: the effective GPU rate (TFLOP/s) at which the
synthetic architecture (``sim.archs``) at 1 GPU takes the published 1-GPU step time
(``gpu_rate.fit_tflops``).
Everything else comes from the hardware profiles (``sim/hardware/*.json``: NVLink inside a node,
the fabric between nodes, ``network_for``) and the DDP model (25 MiB buckets, overlap). The
multi-GPU step (or throughput) it then predicts is compared with the published one:
``error = (predicted - published) / published``. docs/reproductions.md holds the table.
"""
from __future__ import annotations

import json
import statistics

from ddpsim.experiments.gpu_rate import as_published, citation, fit_tflops, noise, step_time
from ddpsim.trace.writer import refuse_empty, refuse_unwritable, write_text

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
     "unit": "s", "cite": PT_DDP, "torch": "1.4.0a0",
     "baseline": (1, 0.100, "row '1 GPUs -- 1M/1G: p50: 0.100s'"),
     "targets": [(2, "nvlink", 0.103, "row '2 GPUs -- 1M/2G: p50: 0.103s'"),
                 (4, "nvlink", 0.103, "row '4 GPUs -- 1M/4G: p50: 0.103s'"),
                 (8, "nvlink", 0.104, "row '8 GPUs -- 1M/8G: p50: 0.104s'"),
                 (16, "ib100", 0.104, "row '16 GPUs -- 2M/8G: p50: 0.104s' (2 machines)")]},
    {"name": "NVIDIA DLE ResNet-50 v1.5, DGX A100 TF32", "arch": "resnet50", "batch": 256, "gpu": "a100",
     "unit": "img/s", "torch": "1.9.0a0",  # the NGC container 21.03's
     "cite": DLE.format(table="Training performance: NVIDIA DGX A100 (8x A100 80GB)",
                        prec="TF32", batch=256, platform="DGXA100"),
     "baseline": (1, 938.0, "row 'GPUs 1': 938 img/s"),
     "targets": [(8, "nvlink", 7248.0, "row 'GPUs 8': 7248 img/s (7.72x)")]},
    {"name": "NVIDIA DLE ResNet-50 v1.5, DGX-1 V100 16GB FP32", "arch": "resnet50", "batch": 112, "gpu": "v100",
     "unit": "img/s", "torch": "1.9.0a0",  # the NGC container 21.03's
     "cite": DLE.format(table="Training performance: NVIDIA DGX-1 16GB (8x V100 16GB)",
                        prec="FP32", batch=112, platform="DGX1V"),
     "baseline": (1, 367.0, "row 'GPUs 1': 367 img/s"),
     "targets": [(8, "nvlink", 2855.0, "row 'GPUs 8': 2855 img/s (7.76x)")]},
]


def reproduce(src: dict) -> list[dict]:
    """Rows for one source: the baseline (fitted) and each target (predicted)."""
    tflops = fit_tflops(src, **noise(src))
    ws, value, where = src["baseline"]
    rows = [{"source": src["name"], "world_size": ws, "network": "-", "role": "baseline (fitted)",
             "published": value, "where": where}]
    rows += [{"source": src["name"], "world_size": n, "network": net, "role": "prediction",
              "published": pub, "where": w} for n, net, pub, w in src["targets"]]
    for r in rows:
        net = r["network"] if r["network"] != "-" else "nvlink"
        r["predicted"] = as_published(src, step_time(src, tflops, r["world_size"], net, **noise(src)), r["world_size"])
        r["rel_error"] = (r["predicted"] - r["published"]) / r["published"]
        r.update(unit=src["unit"], fitted_tflops=tflops, gpu=src["gpu"], batch=src["batch"], torch=src.get("torch"))
    return rows


def run() -> tuple[list[dict], list[str]]:
    rows, cites = [], []
    for src in SOURCES:
        rows += reproduce(src)
        cites.append(citation(src))
    return rows, cites


def table(rows: list[dict]) -> str:
    head = f"{'source':48} {'GPUs':>4} {'network':>7} {'published':>10} {'predicted':>10} {'error':>7}  role"
    lines = [head, "-" * len(head)]
    for r in rows:
        fmt = "{:.3f} s" if r["unit"] == "s" else "{:.0f}/s"
        lines.append(f"{r['source']:48} {r['world_size']:>4} {r['network']:>7} {fmt.format(r['published']):>10} "
                     f"{fmt.format(r['predicted']):>10} {r['rel_error'] * 100:>+6.1f}%  {r['role']}")
    return "\n".join(lines)


SECTIONS = ("ddp", "scaling", "nccl")  # --only: one of them


def add_arguments(p) -> None:
    p.add_argument("--json", help="also write the rows and citations to this JSON file")
    p.add_argument("--only", choices=SECTIONS, help="one section: ddp (1-2 node DDP runs), scaling (multi-node DDP "
                                                    "tables), nccl (nccl-tests bus bandwidths); default all")


def _errors(rows: list[dict]) -> dict:
    preds = [abs(r["rel_error"]) for r in rows if r["role"] == "prediction"]
    return {"predictions": len(preds), "median_abs_error": statistics.median(preds), "max_abs_error": max(preds)}


def _sections(only: str | None) -> dict:
    """{section: (rows, table text, citations)} for the sections asked for."""
    from ddpsim.experiments import published_nccl, published_scaling

    out = {}
    if only in (None, "ddp"):
        rows, cites = run()
        out["ddp"] = (rows, table(rows), cites)
    if only in (None, "scaling"):
        rows = published_scaling.run()
        out["scaling"] = (rows, published_scaling.table(rows),
                          [citation(s) for s in published_scaling.SOURCES])
    if only in (None, "nccl"):
        rows = published_nccl.run()
        out["nccl"] = (rows, published_nccl.table(rows), published_nccl.citations())
    return out


def main(args) -> int:
    refuse_empty(getattr(args, "json", None), "--json")  # before the work: it wrote nothing, and said nothing
    if getattr(args, "json", None):  # before the work (write_text makes its folder after it)
        refuse_unwritable(args.json, "--json")
    sections = _sections(getattr(args, "only", None))
    summary = {}
    for name, (rows, text, cites) in sections.items():
        print(f"== {name}\n{text}\n\nSources:")
        for c in cites:
            print(f"- {c}")
        print()
        summary[name] = _errors(rows)
        if name == "nccl":
            summary[name]["per_source_median"] = {
                s: statistics.median(abs(r["rel_error"]) for r in rows if r["source"] == s and r["role"] == "prediction")
                for s in dict.fromkeys(r["source"] for r in rows)}
    if getattr(args, "json", None):
        write_text(json.dumps({k: {"rows": v[0], "sources": v[2]} for k, v in sections.items()}, indent=1),
                   args.json)  # whole or not at all
    first = summary.get("ddp") or next(iter(summary.values()))
    print(json.dumps({**first, **{k: v for k, v in summary.items()}}, separators=(",", ":")))
    return 0
