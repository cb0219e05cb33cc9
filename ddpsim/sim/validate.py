"""``python -m ddpsim validate``: compare the simulator's prediction with a measurement.

    python -m ddpsim validate --trace real.json
        simulate the recorded run itself (its own options) and compare.
    python -m ddpsim validate --trace real_25mb.json --against real_1mb.json
        learn the workload from the first run, simulate the second run's options
        (bucket cap, find_unused_parameters, static_graph, no_sync_every, world
        size) and compare with the second run's measurement: a real prediction.

For iteration_time_s, exposed_comm_s and overlap_fraction it prints predicted,
measured and the relative error; the last stdout line is one JSON object.
"""
from __future__ import annotations

import json

HELP = "compare simulated and measured iteration time, exposed comm and overlap for recorded traces"
METRICS = ("iteration_time_s", "exposed_comm_s", "overlap_fraction")


def add_arguments(p) -> None:
    p.add_argument("--trace", required=True, help="recorded trace to learn the workload from")
    p.add_argument("--against", help="recorded trace whose options are predicted (default: --trace)")
    p.add_argument("--iters", type=int, default=20, help="synced steps to simulate (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--jitter", type=float, help="default: estimated from the trace")
    p.add_argument("--out", help="write the simulated trace here")


def validate(source, target=None, iters: int = 20, seed: int = 0, jitter: float | None = None) -> dict:
    from ddpsim.sim.api import SimConfig, simulate
    from ddpsim.sim.extract import config_from_trace, workload_from_trace

    target = target or source
    if target.source != "real":
        raise ValueError("validate compares against a recorded (source real) trace")
    w = workload_from_trace(source)
    cfg = SimConfig(**{**config_from_trace(target), "iters": iters, "seed": seed,
                       "jitter": w.meta.get("jitter_estimated", 0.0) if jitter is None else jitter})
    trace, predicted = simulate(w, cfg)
    measured = target.summary()
    rows = {}
    for m in METRICS:
        p, r = predicted[m], measured[m]
        rows[m] = {"predicted": p, "measured": r, "rel_error": (p - r) / r if r else None}
    return {"metrics": rows, "config": {k: v for k, v in cfg.__dict__.items() if k != "stragglers"},
            "workload": w.meta, "trace": trace}


def main(args) -> int:
    from ddpsim.trace import load_trace

    source = load_trace(args.trace)
    target = load_trace(args.against) if args.against else source
    res = validate(source, target, args.iters, args.seed, args.jitter)
    trace = res.pop("trace")
    if args.out:
        trace.save(args.out)
    for m, r in res["metrics"].items():
        err = "n/a" if r["rel_error"] is None else f"{r['rel_error'] * 100:+.1f}%"
        print(f"{m:18} predicted {r['predicted']:.6g}  measured {r['measured']:.6g}  error {err}")
    print(json.dumps({m: r for m, r in res["metrics"].items()}, separators=(",", ":")))
    return 0
