"""A what-if far beyond its recording: the What-if page's cautions, where its allreduce cost comes
from, and what a network other than the recorded one keeps of the recording (no Streamlit).

Where the cost at another world size comes from, in the order the simulation takes it: a network
picked on the page (its profile's datasheet figures); a calibration of the trace (measured here, or
by ``ddpsim calibrate``); the line fitted through the recording's own collectives; or nothing, where
no collective crossed a network (one rank, ``comm_fit["from"] == "none"``: Note [No network from one
rank] in learn/linkfit.py).
"""
from __future__ import annotations

from ddpsim.experiments.worldsize import measured_sizes
from ddpsim.sim import SimConfig
from ddpsim.sim.netmodel import target_cpus
from ddpsim.sim.network import network_for
from ddpsim.trace import Trace

EXTRAPOLATE = 4  # a what-if at more than this many times the recorded ranks gets a caution


def ranks(n: int) -> str:
    """``n`` ranks in words: "1 rank", "2 ranks"."""
    return f"{n} rank{'s' * (n != 1)}"


def far_cautions(trace: Trace | None, work, recorded: int, world_size: int, chosen_network: bool) -> list[str]:
    """The cautions for a what-if of a recording (``work`` learnt from ``trace``, ``recorded`` ranks)
    at ``world_size`` ranks: none within ``EXTRAPOLATE`` times the recording."""
    if world_size <= EXTRAPOLATE * recorded:
        return []
    out = [f"Far beyond the recording: it ran {ranks(recorded)}, this asks for {world_size} "
           f"({world_size / recorded:g}x). {_allreduce_from(trace, work, recorded, world_size, chosen_network)} "
           "Read the result as a trend, not a prediction."]
    meta = trace.meta if trace is not None else {}
    if str(meta.get("backend", "")) == "gloo" and (meta.get("placement") or {}).get("device") != "cuda":
        cores = target_cpus(meta.get("calibration") or {}, world_size) if not chosen_network else 0
        where = (f"here they share the {cores} CPU cores its allreduce was measured on, as in a run there, so "
                 "each rank's compute slows with the ranks on its core" if cores else
                 f"{world_size} such ranks are no real machine, and here each has a CPU core of its own")
        out.append(f"The recording is a CPU run (gloo, {recorded} processes sharing cores); {where}. "
                   "For GPU clusters start from a GPU model or a GPU recording.")
    return out


def _allreduce_from(trace: Trace | None, work, recorded: int, world_size: int, chosen_network: bool) -> str:
    """Where the allreduce cost at ``world_size`` comes from, in one sentence (module docstring)."""
    if chosen_network:
        return f"Nothing was measured at {world_size} ranks: the allreduce cost there is the network profile's."
    measured = measured_sizes(trace.meta.get("calibration") if trace is not None else None)  # timed here, if any
    fit = (work.meta.get("comm_fit") or {}) if work is not None else {}
    if not measured and fit.get("from") == "none":
        return (f"No network model was fitted from it: its {ranks(recorded)} sent nothing over a network, so the "
                f"allreduce cost at {world_size} ranks is not known from the recording.")
    sizes = sorted(measured or {recorded})
    return (f"The allreduce cost at {world_size} ranks comes from a network model fitted at "
            f"{' and '.join(map(str, sizes[:-1]))}{' and ' * (len(sizes) > 1)}{ranks(sizes[-1])}, not from a "
            "measurement there.")


def other_network(cfg: SimConfig, learnt: float, gpu: str | None = None) -> str:
    """Where a recording's allreduce times come from on a chosen network, and whether its compute
    keeps the slowdown its collectives caused (Note [The recorded slowdown goes with its collectives]);
    ``gpu``: the recording's GPU (``meta.gpu``), named where another GPU's node stands in for it."""
    kept = cfg.hardware is not None and abs(learnt - (cfg.interference or 0.0)) <= 0.005  # learn/hardware.py
    slowdown = "" if learnt <= 0.005 else (
        f", which ran {1 + learnt:.2f}x as long while its NCCL collectives ran, and still does" if kept else
        f", which ran {1 + learnt:.2f}x as long while the recorded collectives ran, at its own speed here (the "
        f"chosen network's slowdown: {cfg.interference or 0:.0%})")
    link = network_for(cfg.hardware, cfg.world_size) if cfg.hardware else None
    node = cfg.hardware.partition("-")[0] if cfg.hardware else ""
    stand_in = (f"; the recording's {gpu} is modelled as an {node.upper()} node, the nearest GPU profile"
                if link and gpu and node not in str(gpu).lower().replace(" ", "") else "")
    where = (f"{link.name} (NCCL's model, as `ddpsim simulate --hardware {cfg.hardware}`{stand_in})" if link else
             "the chosen profile's datasheet figures, as one flat link")
    one_node = (" One rank runs no collective: no network is used, and every network gives the same time."
                if cfg.world_size == 1 else
                f" {cfg.world_size} ranks fit in one node of {link.cluster.gpus_per_node}: only its NVLink is "
                "used, and every network between nodes gives the same time."
                if link and cfg.world_size <= link.cluster.gpus_per_node else "")
    return (f"The network is not the recorded one: the allreduce times come from {where}, the compute from the "
            f"recording{slowdown}.{one_node}")
