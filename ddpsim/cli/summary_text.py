"""The lines `ddpsim simulate` prints about one simulation, before its JSON summary: the time per
iteration (per micro-step under no_sync), what waiting for the slowest rank costs (as the What-if page
measures it: ``learn.noise.wait_s``), and the NCCL algorithm and protocol each bucket's allreduce ran."""
from __future__ import annotations

from collections import Counter

from ddpsim.cli.headline import step_name
from ddpsim.learn.noise import wait_s
from ddpsim.sim import SimConfig


def summary_lines(work, cfg: SimConfig, summary: dict, simulate_fn) -> list[str]:
    """``simulate_fn(work, cfg) -> (trace, summary)`` runs the simulation without rank noise, if any."""
    step = step_name(cfg.no_sync_every)
    overlap = (f"overlap {summary['overlap_fraction']:.0%}" if summary.get("communicates", True)
               else "no overlap to measure (no collective communicated)")  # as import, record and the page say it
    lines = [f"{step} {summary['iteration_time_s'] * 1e3:.3f} ms, exposed comm "
             f"{summary['exposed_comm_s'] * 1e3:.3f} ms, {overlap}"]
    if not summary.get("communicates", True):  # the noop hook: nothing sent, nobody waits for anybody
        return lines
    if cfg.world_size > 1 and (cfg.jitter or cfg.recorded_ranks or cfg.stragglers):
        w, t = wait_s(simulate_fn, work, cfg, summary), summary["iteration_time_s"]
        lines.append(f"waiting for stragglers: {w * 1e3:.3f} ms of the {t * 1e3:.3f} ms "
                     f"({w / t:.1%}; every rank waits for the slowest of {cfg.world_size})")
    elif cfg.world_size > 1 and int(work.meta.get("recorded_world_size") or 0) == 1:
        lines.append("waiting for stragglers: not included (one recorded rank shows no rank-to-rank spread; "
                     "--jitter F sets one)")
    if cfg.bandwidth_gbps is not None:  # the flat link given, which replaces a --hardware cluster's NCCL model
        lines.append(f"network: {summary['link']['name']}")
    algos = Counter(f"{n['algo']}/{n['proto']}" for n in summary.get("nccl") or [] if n.get("algo") != "none")
    hook = cfg.hook()
    if algos and (hook is None or hook.name in ("allreduce", "round-robin")):  # DDP's own fp32 allreduce,
        # as in sim/hooked.compresses: NCCL's choice is for the fp32 buckets; a compressing hook sends other sizes
        lines.append("NCCL: " + ", ".join(f"{a} ({k} bucket{'s' * (k != 1)})" for a, k in algos.most_common()))
    return lines
