"""What a comm hook would cost in a recorded run's ranks, for the simulator's ``hook_rates``.

A recording measures the pieces of a hook at its end, in its own ranks (``meta.hook_rates``,
``ddpsim/record/hookprobe.py``: casts, matmuls, 2-byte allreduces, a collective's latency); a
replay's what-if carries them (``extract.config_from_trace``, ``extract.replay_config``).

Note [A cast costs what the division did]: DDP's own launch divides the fp32 bucket by the world
size on the autograd thread, one pass over the bucket's memory; fp16_compress_hook's cast (with
its division of the half tensor) is one such pass too, as is the copy back. In a recording the
division's seconds per byte (``Workload.launch_s_per_byte``) are measured where the cast would
run, on a bucket the backward has just written, beside the other ranks' work: 1.0e-10 s/B on the
2-core machine, where the probe's cast in a quiet loop took 3e-11 and the recorded fp16 hook's
cast 1.1e-10. So a replay prices casts at the larger of the two.
"""
from __future__ import annotations

from ddpsim.learn import alone
from ddpsim.sim.comm_hooks import RATES, SENT_DTYPE
from ddpsim.sim.workload import Workload
from ddpsim.trace import Trace


def recorded(trace: Trace) -> dict:
    """``{"hook_rates": ...}`` from the trace's ``meta.hook_rates`` (the names the simulator knows),
    or {} for a trace without them (older recordings, imports, simulated runs)."""
    rates = trace.meta.get("hook_rates")
    if not isinstance(rates, dict) or not rates:
        return {}
    return {"hook_rates": {k: float(v) for k, v in rates.items() if k in RATES and v is not None}}  # null: unknown


def in_replay(w: Workload, cfg: dict) -> dict:
    """``cfg`` (SimConfig fields) with its casts priced at the larger of the probe's rate and the
    learnt division's (Note [A cast costs what the division did])."""
    rates = cfg.get("hook_rates")
    if rates is None or w.launch_s_per_byte <= rates.get("cast_s_per_byte", 0.0):
        return cfg
    return {**cfg, "hook_rates": {**rates, "cast_s_per_byte": w.launch_s_per_byte}}


NOOP_ON_CPU = ("noop on a CPU recording without its backward alone (recorded before ddpsim measured it, "
               "with a hook, with ranks sharing cores, or asked at another world size): without collectives "
               "gloo's threads leave the cores to the backward, and how much of the recorded backward they "
               "took is then the least certain part of the CPU model: noop was predicted up to 33% fast at "
               "small bucket caps that way (docs/comm-hooks.md).")
NO_16_BIT = ("This recording timed no 16-bit allreduce (one rank, or gloo with CUDA tensors): it is "
             "priced at half an fp32 one, as with NCCL, where gloo on a CPU took 1.0-1.4x (fp16) and 0.67-1.03x "
             "(bf16) here.")
NO_RATES = ("This trace has no hook costs measured in its ranks (meta.hook_rates: recordings made "
            "before ddpsim measured them, imported profiles): the hook's casts and matmuls are free here "
            "and a 16-bit allreduce costs half an fp32 one, as with NCCL on a GPU. Record the run again "
            "with this ddpsim for what they cost on its machine.")


def caution(trace: Trace | None, comm_hook: str | None, work: Workload | None = None,
            world_size: int | None = None) -> str | None:
    """One sentence when a hook what-if starts from a trace without ``meta.hook_rates``, from a gloo
    trace that timed no 16-bit allreduce, or asks for noop at ``world_size`` on a CPU recording whose
    backward alone does not price it in ``work`` (Note [A run without collectives computes alone])."""
    if trace is None or comm_hook in (None, "allreduce"):
        return None
    rates = recorded(trace).get("hook_rates")
    if not rates:
        return NO_RATES
    gloo = trace.source == "real" and trace.meta.get("backend") == "gloo"
    if comm_hook == "noop":
        cpu = gloo and (trace.meta.get("placement") or {}).get("device") != "cuda"
        priced = work is not None and alone.noop_scale(work, comm_hook, world_size) is not None
        return NOOP_ON_CPU if cpu and not priced else None
    if comm_hook not in SENT_DTYPE or not gloo:
        return None
    if "float16_allreduce_cost" not in rates:
        return NO_16_BIT
    cost = rates.get(f"{SENT_DTYPE[comm_hook]}_allreduce_cost")
    if cost is not None and cost >= 1.0:  # the hook can only lose here: say why
        return (f"This recording's ranks timed gloo's {SENT_DTYPE[comm_hook]} allreduce at {cost:.2f}x the fp32 one "
                f"of as many elements (gloo sums 16-bit floats through float conversions on the CPU): {comm_hook} "
                "sends half the bytes but saves no allreduce time here, and its casts cost extra. With NCCL on "
                "GPUs a 16-bit allreduce takes about half.")
    return None
