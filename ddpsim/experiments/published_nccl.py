"""Published nccl-tests allreduce bus bandwidths beside NCCL's model (``sim/nccl.py``) on the same cluster.

Each source is one system's ``all_reduce_perf`` table at several GPU counts (cited to the file and
row). The model takes the node from the hardware profile (``sim/hardware/*.json``: GPUs and NICs
per node, NVLink, CPU, GPU generation) and learns one number per source, the single point in
``fit``: one NIC's achievable bandwidth, by bisection, so that the model's bus bandwidth at that
point equals the published one. Every other point is a prediction:
``error = (predicted - published) / published``, bus bandwidth as nccl-tests computes it
(``bytes / time x 2(k-1)/k``). ``algo`` is NCCL_ALGO as the run set it ("auto": unset).
"""
from __future__ import annotations

import math
from dataclasses import replace

from ddpsim.sim import nccl
from ddpsim.sim.network import cluster_for, parse_hardware, networks

MiB, GiB = 1 << 20, 1 << 30
ALCF = ("argonne-lcf/alcf-nccl-tests (commit 385be33), results_polaris/nccl_2_21/{run}/all_reduce_output.dat.4 "
        "(NCCL 2.21.5, aws-ofi-nccl, environment (4) of the README, the one it recommends), out-of-place busbw, "
        "line {line}: https://github.com/argonne-lcf/alcf-nccl-tests")
TOGETHER = ("togethercomputer/together-nccl-tests, baselines/{path}, {where}: "
            "https://github.com/togethercomputer/together-nccl-tests")
FA = "flapping-airplanes/2026-05-09_nccl_collective_scaling_report.md (commit 6fd65d1; NCCL 2.28.9, NCCL_ALGO per row)"
SS = "use3a-ss/2026-05-02_nccl_collective_scaling_report.md (commit 0492bed; NCCL 2.29.7, NCCL_ALGO per row)"
_N2, _N8, _N256 = "n2.g4.2024-04-29-19-08-14", "n8.g4.2024-04-29-21-23-48", "n256.g4.2024-04-29-19-19-41"


def _polaris() -> list[tuple]:
    rows = {8: (_N2, 34, [5.70, 13.04, 34.33, 34.84, 35.75, 36.03]),
            32: (_N8, 58, [1.39, 4.73, 13.41, 35.08, 35.62, 36.08]),
            1024: (_N256, 1050, [2.77, 3.23, 9.71, 19.77, 27.42, 30.34])}
    out = []
    for k, (run, line, bws) in rows.items():
        for i, bw in enumerate(bws):  # 1 MiB, 4 MiB, ... 1 GiB: every other size of the table
            out.append((k, MiB << (2 * i), "auto", bw, ALCF.format(run=run, line=line + 2 * i)))
    return out


def _together(path: str, size: int, table: dict, where: str) -> list[tuple]:
    """{algo: {nodes: busbw}} of one report's table -> points (8 GPUs per node)."""
    return [(8 * n, size, algo, bw, TOGETHER.format(path=path, where=f"{where}, column {algo}, row {n}n"))
            for algo, col in table.items() for n, bw in col.items()]


FA_RING = {"ring": {1: 696.38, 2: 389.45, 4: 390.14, 8: 390.60, 16: 389.91, 32: 389.26, 48: 386.56, 60: 366.11}}
FA_RING_16 = {"ring": {1: 693.62, 2: 388.23, 4: 387.02, 8: 389.23, 16: 387.48, 32: 388.13, 48: 372.72, 60: 339.73}}
FA_RING_8 = {"ring": {1: 689.93, 2: 388.80, 4: 388.77, 8: 389.52, 16: 387.41, 32: 386.81, 48: 379.56, 60: 273.01}}
FA_PEAK = {"tree": {1: 551.22, 2: 338.63, 4: 191.90, 8: 193.81, 16: 195.47, 32: 195.37, 48: 195.59, 60: 195.36},
           "nvls": {1: 843.66},
           "nvls_tree": {2: 721.56, 4: 360.71, 8: 345.88, 16: 360.56, 32: 345.24, 48: 338.66, 60: 337.62}}
SS_16 = {"ring": {1: 679.0, 2: 344.7, 4: 334.8, 8: 322.6, 16: 306.3, 32: 304.4, 46: 291.4},
         "tree": {2: 335.2, 4: 190.7, 8: 192.6, 16: 193.4, 32: 193.5, 46: 193.2},
         "nvls": {1: 840.8},
         "nvls_tree": {2: 717.2, 4: 288.9, 8: 274.3, 16: 290.7, 32: 280.7, 46: 274.9}}

SOURCES = [
    {"name": "ALCF Polaris, A100 x4/node, 2 Slingshot-11", "hardware": "polaris-ss11",
     "fit": (8, GiB, "auto", 36.03, ALCF.format(run=_N2, line=44)), "points": _polaris()},
    {"name": "Together 'flapping-airplanes', B200 x8/node, 8 NDR", "hardware": "b200-ib400",
     "fit": (16, 32 * GiB, "ring", 389.45, TOGETHER.format(path=FA, where="table '@ 8/16/32 GiB (Ring)', row 2n")),
     "points": (_together(FA, 32 * GiB, FA_RING, "table 'all_reduce busBW @ 8 GiB / 16 GiB / 32 GiB (Ring)', 32 GiB")
                + _together(FA, 16 * GiB, FA_RING_16, "same table, 16 GiB")
                + _together(FA, 8 * GiB, FA_RING_8, "same table, 8 GiB")
                + _together(FA, 32 * GiB, FA_PEAK, "table 'all_reduce busBW peak (GB/s)' (peak at the largest size)"))},
    {"name": "Together 'use3a-ss', B200 x8/node, 8 NDR", "hardware": "b200-ib400",
     "fit": (16, 16 * GiB, "ring", 344.7, TOGETHER.format(path=SS, where="re-run table 'all_reduce Peak busBW @ 16G', row 2n")),
     "points": _together(SS, 16 * GiB, SS_16, "re-run table 'all_reduce Peak busBW @ 16G (GB/s)'")},
]
BISECT_STEPS = 60  # bisection steps on log(NIC GB/s)


def base_cluster(src: dict) -> nccl.Cluster:
    gpu, net = parse_hardware(src["hardware"])
    return cluster_for(gpu, networks()[gpu.get("default_fabric") if net == "nvlink" else net])


def busbw(c: nccl.Cluster, k: int, nbytes: int, algo: str) -> float:
    return nccl.busbw_GBps(nbytes, nccl.allreduce_s(c, nbytes, k, algo), k)


def fit_nic(src: dict) -> nccl.Cluster:
    """The cluster whose NIC bandwidth gives the published bus bandwidth at ``src['fit']``."""
    k, nbytes, algo, want, _ = src["fit"]
    c = base_cluster(src)
    lo, hi = math.log(0.01), math.log(1e4)
    for _ in range(BISECT_STEPS):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if busbw(replace(c, nic_GBps=math.exp(mid)), k, nbytes, algo) < want else (lo, mid)
    return replace(c, nic_GBps=math.exp((lo + hi) / 2))


def reproduce(src: dict) -> list[dict]:
    c = fit_nic(src)
    rows = []
    for role, (k, nbytes, algo, pub, where) in [("fit", src["fit"])] + [("prediction", p) for p in src["points"]]:
        if role == "prediction" and (k, nbytes, algo) == src["fit"][:3]:
            continue
        chosen = nccl.choose(c, nbytes, k, algo)
        pred = nccl.busbw_GBps(nbytes, chosen[2], k)
        rows.append({"source": src["name"], "gpus": k, "bytes": nbytes, "algo": algo, "published": pub,
                     "predicted": pred, "rel_error": (pred - pub) / pub, "role": role, "where": where,
                     "nccl": f"{chosen[0]}/{chosen[1]}", "nic_GBps": c.nic_GBps})
    return rows


def run() -> list[dict]:
    return [r for src in SOURCES for r in reproduce(src)]


def citations() -> list[str]:
    """Per source: what it is and the one point fitted (every row's own file, table and row: --json)."""
    return [f"{s['name']} (--hardware {s['hardware']}), fitted on {s['fit'][0]} GPUs {size_label(s['fit'][1])}: "
            f"{s['fit'][4]}" for s in SOURCES]


def size_label(n: int) -> str:
    return f"{n // GiB} GiB" if n >= GiB else f"{n // MiB} MiB"


def table(rows: list[dict]) -> str:
    head = f"{'source':52} {'GPUs':>5} {'size':>7} {'NCCL_ALGO':>9} {'published':>9} {'predicted':>9} {'error':>7}  model runs"
    lines = [head, "-" * len(head)]
    for r in rows:
        err = "(fit)" if r["role"] == "fit" else f"{r['rel_error'] * 100:+.1f}%"
        lines.append(f"{r['source']:52} {r['gpus']:>5} {size_label(r['bytes']):>7} {r['algo']:>9} "
                     f"{r['published']:>9.2f} {r['predicted']:>9.2f} {err:>7}  {r['nccl']}")
    return "\n".join(lines)
