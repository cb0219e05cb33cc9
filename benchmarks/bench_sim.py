"""Benchmark of the DDP simulator (ddpsim.sim).  Run: python benchmarks/bench_sim.py [--quick]

Reports
  1. events/s: model events (gradient-ready, bucket ready/launch/complete, spans) produced
     per second with every rank simulated as its own actor (jitter on), and simpy kernel
     events per second; also the per-gradient path (interference > 0), where every
     gradient is its own simpy timeout.                                   goal >= 300k/s
  2. a 100-configuration sweep of ResNet-50 (161 tensors) at world size 8.  goal < 2 s
  3. one iteration at 1024 ranks, rank-grouped and fully explicit.        goal < 5 s
  4. a run at 4096 ranks (every rank explicit, jitter on) completes.
  5. ResNet-50 on 100,000 V100s (v100-ib100), ranks grouped, NCCL's choice of algorithm
     (trees) and every rank waiting for the expected slowest.   goal < 2 s
The last line is one JSON object with the figures.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddpsim.sim import SimConfig, simulate, sweep, synthetic  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main(quick: bool = False) -> dict:
    w = synthetic("resnet50", "a100-ib200")
    res = {}

    ranks = 128 if quick else 512
    (_, s), el = timed(lambda: simulate(w, SimConfig(world_size=ranks, jitter=0.05, iters=3,
                                                     max_explicit_ranks=100_000)))
    res["events"] = {"ranks": ranks, "model_events": s["model_events"], "simpy_events": s["simpy_events"],
                     "sim_s": s["sim_wall_s"], "total_s": el,
                     "model_events_per_s": s["model_events"] / s["sim_wall_s"],
                     "simpy_events_per_s": s["simpy_events"] / s["sim_wall_s"]}
    (_, s), el = timed(lambda: simulate(w, SimConfig(world_size=ranks // 4, jitter=0.05, iters=3,
                                                     interference=0.2, max_explicit_ranks=100_000)))
    res["events_per_gradient_path"] = {"ranks": ranks // 4, "simpy_events": s["simpy_events"],
                                       "simpy_events_per_s": s["simpy_events"] / s["sim_wall_s"],
                                       "model_events_per_s": s["model_events"] / s["sim_wall_s"]}

    grid = {"bucket_cap_mb": [0.5, 1, 2, 5, 10, 25, 50, 100, 200, 400],
            "order": ["torch", "reverse", "definition", "ready", "random"], "algo": ["ring", "tree"]}
    rows, el = timed(lambda: sweep(w, grid, SimConfig(world_size=8, iters=3)))
    best = next(r for r in rows if r["best"])
    res["sweep"] = {"configs": len(rows), "seconds": el, "best": best}

    (_, s), el = timed(lambda: simulate(w, SimConfig(world_size=1024, iters=1, jitter=0.05)))
    res["1024_grouped"] = {"seconds": el, "actors": s["actors"], "iteration_time_s": s["iteration_time_s"]}
    (_, s), el = timed(lambda: simulate(w, SimConfig(world_size=1024, iters=1, jitter=0.05,
                                                     max_explicit_ranks=100_000)))
    res["1024_explicit"] = {"seconds": el, "actors": s["actors"], "iteration_time_s": s["iteration_time_s"]}
    (_, s), el = timed(lambda: simulate(w, SimConfig(world_size=4096, iters=1 if quick else 2, jitter=0.05,
                                                     max_explicit_ranks=100_000)))
    res["4096_explicit"] = {"seconds": el, "actors": s["actors"], "iteration_time_s": s["iteration_time_s"],
                            "completed": True}

    v100 = synthetic("resnet50", "v100-ib100")
    (_, s), el = timed(lambda: simulate(v100, SimConfig(world_size=100_000, jitter=v100.meta["rank_spread"],
                                                        jitter_mode="expected")))
    res["100000_grouped_nccl"] = {"seconds": el, "actors": s["actors"], "iteration_time_s": s["iteration_time_s"],
                                  "nccl": sorted({f"{b['algo']}/{b['proto']}" for b in s["nccl"]})}

    e = res["events"]
    print(f"events/s ({e['ranks']} explicit ranks): model {e['model_events_per_s']:,.0f}/s, "
          f"simpy {e['simpy_events_per_s']:,.0f}/s   (goal >= 300k)")
    g = res["events_per_gradient_path"]
    print(f"events/s, per-gradient path ({g['ranks']} ranks, interference): simpy "
          f"{g['simpy_events_per_s']:,.0f}/s, model {g['model_events_per_s']:,.0f}/s")
    print(f"sweep: {res['sweep']['configs']} ResNet-50 configs at world 8 in {res['sweep']['seconds']:.2f} s "
          f"(goal < 2 s); best {best['bucket_cap_mb']} MiB / {best['order']} / {best['algo']}: "
          f"{best['iteration_time_s'] * 1e3:.2f} ms")
    for k in ("1024_grouped", "1024_explicit", "4096_explicit"):
        r = res[k]
        print(f"{k}: {r['seconds']:.2f} s ({r['actors']} actors), iteration {r['iteration_time_s'] * 1e3:.2f} ms")
    r = res["100000_grouped_nccl"]
    print(f"100000_grouped_nccl: {r['seconds']:.2f} s ({r['actors']} actors, {', '.join(r['nccl'])}), "
          f"iteration {r['iteration_time_s'] * 1e3:.2f} ms   (goal < 2 s)")
    print(json.dumps(res, default=str, separators=(",", ":")))
    return res


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
