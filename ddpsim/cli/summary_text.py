"""The lines `ddpsim simulate` prints about one simulation, before its JSON summary: the time per
iteration (per micro-step under no_sync), whether it replays the recorded iterations
(``learn.replay_words``), what waiting for the slowest rank costs (as the page measures
it: ``learn.noise.wait_s``), and the NCCL algorithm and protocol each bucket's allreduce ran."""
from __future__ import annotations

from collections import Counter

from ddpsim.cli.headline import step_name
from ddpsim.learn.noise import wait_and_quiet
from ddpsim.learn.replay_words import not_replayed, uneven_ranks
from ddpsim.sim import SimConfig


def summary_lines(work, cfg: SimConfig, summary: dict, simulate_fn) -> list[str]:
    """``simulate_fn(work, cfg) -> (trace, summary)`` runs the simulation without rank noise, if any."""
    step = step_name(cfg.no_sync_every)
    overlap = (f"overlap {summary['overlap_fraction']:.0%}" if summary.get("communicates", True)
               else "no overlap to measure (no collective communicated)")  # as import, record and the page say it
    lines = [f"{step} {summary['iteration_time_s'] * 1e3:.3f} ms, exposed comm "
             f"{summary['exposed_comm_s'] * 1e3:.3f} ms, {overlap}"]
    if (recorded := int(work.meta.get("recorded_world_size") or 0)) and work.meta.get("kind") == "trace":
        played = {"recorded_ranks": cfg.recorded_ranks, "iters": cfg.iters, "backward_scale": cfg.backward_scale,
                  "jitter": cfg.jitter}  # as the page reads them from a simulated trace's meta.config
        if (said := not_replayed(played, cfg.world_size, (summary.get("link") or {}).get("cpus"), recorded)):
            each = uneven_ranks(work.meta) if cfg.world_size != recorded else None
            lines.append(said + (f" The recorded ranks did not run equally fast ({each} the typical rank's backward): "
                                 f"at {cfg.world_size} ranks no rank is known to be that slow." if each else ""))
    if not summary.get("communicates", True):  # the noop hook: nothing sent, nobody waits for anybody
        return lines
    if cfg.world_size > 1 and (cfg.jitter or cfg.recorded_ranks or cfg.stragglers):
        (w, quiet), t = wait_and_quiet(simulate_fn, work, cfg, summary), summary["iteration_time_s"]
        exposed, alone = summary["exposed_comm_s"] * 1e3, quiet["exposed_comm_s"] * 1e3
        lines.append(f"waiting for stragglers: {w * 1e3:.3f} ms of the {t * 1e3:.3f} ms "
                     f"({w / t:.1%}; every rank waits for the slowest of {cfg.world_size})"
                     + (f"; without the spread, exposed comm is {alone:.3f} ms: the {exposed:.3f} ms above includes "
                        "the time faster ranks wait in the allreduces for the slowest" if f"{exposed:.3f}" != f"{alone:.3f}"
                        and exposed > alone else ""))
    elif cfg.world_size > 1 and int(work.meta.get("recorded_world_size") or 0) == 1:
        lines.append("waiting for stragglers: not included (one recorded rank shows no rank-to-rank spread; "
                     "--jitter F sets one)")
    if cfg.bandwidth_gbps is not None:  # the flat link given, which replaces a --hardware cluster's NCCL model
        lines.append(f"network: {summary['link']['name']}")
    elif cfg.hardware and work.meta.get("kind") == "trace" and work.meta.get("backend") != "nccl":
        node = (summary["link"].get("cluster") or {}).get("gpus_per_node") or 0
        lines.append(f"network: {summary['link']['name']}, in place of the recording's "
                     f"{work.meta.get('backend') or 'network'}: NCCL's collectives and launches"
                     + (f"; {cfg.world_size} ranks fit in one node of {node}: only its NVLink is used, and every "
                        "network between nodes gives the same time" if 1 < cfg.world_size <= node else ""))
    algos = Counter(f"{n['algo']}/{n['proto']}" for n in summary.get("nccl") or [] if n.get("algo") != "none")
    hook = cfg.hook()
    if algos and (hook is None or hook.name in ("allreduce", "round-robin")):  # DDP's own fp32 allreduce,
        # as in sim/hooked.compresses: NCCL's choice is for the fp32 buckets; a compressing hook sends other sizes
        lines.append("NCCL: " + ", ".join(f"{a} ({k} bucket{'s' * (k != 1)})" for a, k in algos.most_common()))
    return lines
