"""Why a simulation of a recording is not its recorded iterations replayed, in words: what the What-if
page and ``simulate`` say under such a figure (Note [Replay the recorded ranks' speeds] in noise.py)."""
from __future__ import annotations

UNEVEN = 1.10  # slowest over fastest recorded rank's backward speed (rank_factors) that earns a caution


def uneven_ranks(meta: dict) -> str | None:
    """"rank 0 0.90x, rank 1 1.10x": the recorded ranks' lasting backward speeds over the typical rank's
    (``meta``: a recording's Workload's, Note [Ranks are not equally fast] in gradients.py) where the
    slowest is ``UNEVEN`` times the fastest or more; else None."""
    factors = {int(r): float(f) for r, f in (meta.get("rank_factors") or {}).items()}
    if len(factors) < 2 or max(factors.values()) < UNEVEN * min(factors.values()):
        return None
    return ", ".join(f"rank {r} {f:.2f}x" for r, f in sorted(factors.items()))


def not_replayed(config: dict, world_size: int, cpus: int | None, recorded_world_size: int | None = None) -> str:
    """The sentence for a simulation whose ``config`` (SimConfig fields, as a trace's meta.config keeps them)
    has no ``recorded_ranks``; "" where it replays them. ``cpus``: the CPU cores its ranks shared (the
    link's), ``recorded_world_size``: the recording's, where it differs from ``world_size``."""
    if config.get("recorded_ranks"):
        return ""
    n = world_size
    if recorded_world_size and recorded_world_size != n:
        why = (f"the recording ran {recorded_world_size} rank{'s' * (recorded_world_size != 1)}, so at {n} there "
               "are no recorded ranks to replay step by step")
    elif cpus:
        why = f"its {n} ranks shared {cpus} CPU core{'s' * (cpus != 1)}, so the simulator shares the cores itself"
    else:
        why = "the workload learnt from the recording holds no per-step speeds of its ranks"
    return (f"Not the recorded iterations replayed: {why}. It plays {config.get('iters')} steps in which "
            f"{_speeds(config.get('backward_scale') or {})}, and {_noise(float(config.get('jitter') or 0.0), n)}.")


def _speeds(scale: dict) -> str:
    """The ranks' backward times a drawn simulation keeps: the recorded ranks' medians over the typical rank's
    (``backward_scale``, ``learn.gradients.rank_factors``) where it has them, else the typical one for all."""
    if not scale:
        return "every rank computes in the typical recorded time"
    each = ", ".join(f"rank {r} {float(f):.2f}x" for r, f in sorted(scale.items(), key=lambda kv: int(kv[0])))
    return f"each rank's backward takes its recorded rank's median time ({each} the typical rank's)"


def _noise(jitter: float, n: int) -> str:
    """The rank noise a drawn simulation adds to those speeds in each step (``SimConfig.jitter``)."""
    if jitter > 0:
        return f"each rank draws noise of the spread measured between the recorded ranks ({jitter * 100:.1f}%)"
    why = "one rank waits for nobody" if n == 1 else "none was measured between the recorded ranks"
    return f"no rank noise is drawn ({why})"
