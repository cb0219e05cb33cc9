"""When does gradient compression pay? ``python -m ddpsim.experiments.compression``.

For a GPU model (``ddpsim.sim.synthetic``: ResNet-50, BERT-large) at a world size, the simulator
plays DDP's own allreduce and each comm hook (``ddpsim/sim/comm_hooks.py``) over a range of
network bandwidths (the profile's network with its bandwidth replaced), the hooks' compute
priced at the GPU's memory and compute rates (``comm_hooks.device_rates``). The break-even
bandwidth of a hook is where its iteration time meets the plain allreduce's: below it the hook
is faster. SIMULATED: no GPU cluster was run; the hooks' accuracy (PowerSGD's convergence) is
not modelled, only their time.
"""
from __future__ import annotations

import argparse
import math
import sys

BANDWIDTHS_GBPS = (1, 2, 5, 10, 25, 50, 100, 200, 400, 800)  # Gbit/s per rank, the x axis
HOOKS = (None, "fp16", "powersgd")  # None: DDP's own allreduce
POWERSGD = {"powersgd_rank": 4, "powersgd_start_iter": 1}  # PowerSGD from the second synced step


def iteration_vs_bandwidth(arch: str, hardware: str, world_size: int = 64, hooks=HOOKS,
                           bandwidths=BANDWIDTHS_GBPS, iters: int = 3) -> list[dict]:
    """One row per (hook, bandwidth): the steady iteration time and exposed communication (s)."""
    from ddpsim.sim import SimConfig, simulate, synthetic
    from ddpsim.sim.comm_hooks import gpu_rates

    w = synthetic(arch, hardware)
    rows = []
    for hook in hooks:
        extra = POWERSGD if hook == "powersgd" else {}
        rates = gpu_rates(hardware.lower().partition("-")[0], extra.get("powersgd_rank", 1)) if hook else {}
        for gbps in bandwidths:
            cfg = SimConfig(world_size=world_size, iters=iters, comm_hook=hook, hook_rates=rates,
                            bandwidth_gbps=float(gbps), trace_ranks=1, **extra)
            s = simulate(w, cfg)[1]
            rows.append({"arch": arch, "hardware": hardware, "world_size": world_size, "hook": hook or "allreduce",
                         "bandwidth_gbps": gbps, "iteration_time_s": s["iteration_time_s"],
                         "exposed_comm_s": s["exposed_comm_s"]})
    return rows


def break_even_gbps(rows: list[dict], hook: str) -> float | None:
    """The bandwidth (Gbit/s, interpolated on a log scale) above which ``hook`` stops beating the
    plain allreduce; None if it wins (or loses) over the whole range."""
    plain = {r["bandwidth_gbps"]: r["iteration_time_s"] for r in rows if r["hook"] == "allreduce"}
    gain = [(r["bandwidth_gbps"], plain[r["bandwidth_gbps"]] - r["iteration_time_s"])
            for r in rows if r["hook"] == hook]
    for (b0, g0), (b1, g1) in zip(gain, gain[1:]):
        if g0 > 0 >= g1:
            f = g0 / (g0 - g1)
            return math.exp(math.log(b0) + f * (math.log(b1) - math.log(b0)))
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.experiments.compression", description=__doc__.splitlines()[0])
    ap.parse_args(argv)  # no options: --help, and a clear error on anything else
    for arch, hardware in (("resnet50", "v100-eth25"), ("bert-large", "a100-eth100")):
        rows = iteration_vs_bandwidth(arch, hardware)
        print(f"{arch} on {hardware} x 64 ranks (SIMULATED), iteration ms by network Gbit/s:")
        print("| hook | " + " | ".join(f"{b}" for b in BANDWIDTHS_GBPS) + " | break-even Gbit/s |")
        print("|---|" + "---|" * (len(BANDWIDTHS_GBPS) + 1))
        for hook in ("allreduce", *(h for h in HOOKS if h)):
            times = [f"{r['iteration_time_s'] * 1e3:.1f}" for r in rows if r["hook"] == hook]
            be = break_even_gbps(rows, hook) if hook != "allreduce" else None
            print(f"| {hook} | " + " | ".join(times) + f" | {'-' if be is None else f'{be:.0f}'} |")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
