"""The What-if page's scaling curve: the chosen options at every world size (no Streamlit call here).

Each world size of the page's slider is the what-if with only the world size changed
(``whatif.sim_config``), split into compute, exposed communication and waiting for the slowest rank
by ``ddpsim.learn.scaling`` (``python -m ddpsim scaling`` prints the same rows). Every size draws its
ranks' speeds, the recorded size too, so the curve has no step where a recording is replayed rank by
rank (Note [The unchanged run is simulated as the what-if is] in whatif.py). A recording at a world
size whose network is not known there (nothing measured, a GPU trace of gloo or of a GPU without a node
profile, with no network chosen: ``experiments.worldsize.plan``) is left out, and a note says why; so
is a size where the chosen NCCL algorithm does not run (NCCL's choice there).
"""
from __future__ import annotations

from ddpsim.app import network as network_plan
from ddpsim.app import units, whatif
from ddpsim.app.whatif_widgets import nccl_algos, run_seconds
from ddpsim.learn.scaling import split, with_efficiency
from ddpsim.sim.api import checked
from ddpsim.viz.scaling import share

KNOWN = ("recorded", "alone", "calibrated", "node")  # a recording's plans whose network is known at that size


def seconds(summary: dict, base: whatif.Base, trace, work, choices: dict) -> float:
    """About how long the curve of ``choices`` (as ``rows`` takes them) takes here: two simulations a size it
    simulates, each of the events the simulator estimates for it (``sim.api.checked``: its rank actors x
    steps x gradients), at the seconds per estimated event that the what-if of ``summary`` took (its whole
    simulation, ``sim_wall_s``). Over five samples at 2, 16 and 256 ranks it said 0.97-2.9x the time
    taken, where the what-if's own time, twice a size, said 0.06-3.5x (one run, 2026-12-01): a what-if of
    2 ranks plays 2 actors, the curve's largest sizes up to 64 each."""
    per_event = run_seconds(summary) / max(int(summary.get("estimated_events") or 0), 1)
    events = 0
    for ws in known_sizes(base, trace, choices.get("network", whatif.AS_RECORDED))[0]:
        try:
            events += 2 * checked(work, size_config(base, trace, work, _picked(base, choices, ws)[0], ws))[2]
        except ValueError:  # refused at this size: ``rows`` leaves it out too
            continue
    return per_event * events


def _picked(base: whatif.Base, choices: dict, ws: int) -> tuple[dict, bool]:
    """``choices`` at ``ws`` ranks, and whether their NCCL algorithm was dropped for NCCL's choice: it does not
    run there (NVLS beyond one node)."""
    if choices.get("algo") and base.kind != "trace" and choices["algo"] not in nccl_algos(base, ws):
        return {**choices, "algo": None}, True
    return choices, False


def size_config(base: whatif.Base, trace, work, picked: dict, ws: int):
    """The curve's SimConfig at ``ws`` ranks: the what-if's ``picked`` choices, its ranks' speeds drawn."""
    return whatif.sim_config(base, world_size=ws, work=work, trace=trace, noise="drawn", **picked)


def known_sizes(base: whatif.Base, trace, network, sizes=None) -> tuple[list[int], list[int], bool]:
    """(the sizes whose network is known, those where it is not, whether one of those can be measured here),
    of ``sizes`` (None: the world-size slider's, ``whatif.world_options``): a recording's network as recorded
    is known at its own size, one rank and a calibration's sizes."""
    known, unknown, measurable = [], [], False
    for ws in whatif.world_options(base) if sizes is None else sizes:
        plan = network_plan.world_plan(base, trace, ws, network)
        if plan is None or plan.action in KNOWN:
            known.append(ws)
        else:
            unknown.append(ws)
            measurable |= plan.action == "measure"
    return known, unknown, measurable


def rows(base: whatif.Base, trace, work, choices: dict, simulate_fn=whatif.run,
         sizes=None, progress=None) -> tuple[list[dict], list[str]]:
    """One row per world size of ``sizes`` (None: the world-size slider's) that can be simulated with
    ``choices`` (``whatif.sim_config``'s keyword arguments but the world size), and the notes on the sizes
    left out or changed.

    A row: world_size, iteration_time_s = compute_s + exposed_comm_s + waiting_s, efficiency (the 1-rank
    iteration time over this one: each rank's share of its 1-rank throughput, at a fixed batch per rank) and
    nccl (the algorithm/protocol of the largest bucket's allreduce, "" where there is none). ``progress(done,
    total)``, if given, is called after each world size simulated."""
    sizes = whatif.world_options(base) if sizes is None else list(sizes)
    known, unknown, measurable = known_sizes(base, trace, choices.get("network", whatif.AS_RECORDED), sizes)
    out, notes, dropped = [], [], []
    for n, ws in enumerate(known, 1):
        picked, drop = _picked(base, choices, ws)
        dropped += [ws] if drop and ws > 1 else []  # one rank runs no collective: no algorithm to drop
        try:
            out.append(split(ws, simulate_fn, work, size_config(base, trace, work, picked, ws)))
        except ValueError as e:  # the simulator refuses this size: say so, keep the others
            notes.append(f"{ws:,} ranks: {e}")
        if progress is not None:
            progress(n, len(known))
    if dropped:
        notes.insert(0, f"{choices['algo']} does not run at {_sizes(dropped, sizes)} on {base.gpu}: "
                        "NCCL's choice there")
    if unknown:
        notes.insert(0, f"{_sizes(unknown, sizes)}: {_unknown_why(trace, measurable)}")
    return with_efficiency(out), notes


def _unknown_why(trace, measurable: bool) -> str:
    """Why the curve leaves out the sizes whose network the recording does not know, and what would add them."""
    if not measurable:
        return "nothing is known about the recording's network there (pick a network above)"
    return (f"nothing was measured about the recording's network there; a what-if at one of them prices its "
            f"allreduce with the ring model fitted at the recorded {trace.world_size} ranks, a guess it labels, which "
            "the curve does not draw (pick a network above, or move World size to one of them and press its "
            "Measure button)")


def _sizes(sizes: list[int], among: list[int]) -> str:
    """"4 to 100,000 ranks" for a run of consecutive sizes of ``among``, else each one."""
    at = [among.index(n) if n in among else -1 for n in sizes]
    if len(sizes) > 2 and at[0] >= 0 and at == list(range(at[0], at[0] + len(at))):
        return f"{sizes[0]:,} to {sizes[-1]:,} ranks"
    return f"{', '.join(f'{n:,}' for n in sizes[:-1])}{' and ' if len(sizes) > 1 else ''}{sizes[-1]:,} ranks"


def _d(seconds: float) -> str:
    return units.duration(seconds, units.ms_digits(seconds))


def describe(rows: list[dict], chosen: int, recorded: int | None = None) -> str:
    """One paragraph on the curve: from the fewest to the most ranks, and the chosen world size;
    ``recorded``: a recording's world size, whose bar is drawn, not replayed (module docstring)."""
    first, last = rows[0], rows[-1]
    text = (f"SIMULATED, the options above at each world size: from {first['world_size']:,} to {last['world_size']:,} "
            f"ranks the iteration goes from {_d(first['iteration_time_s'])} to "
            f"{_d(last['iteration_time_s'])}")
    if last.get("efficiency") is not None and last["world_size"] > 1:
        text += f", and each rank keeps {share(last['efficiency'])} of the throughput it has alone"
    text += (f"; at {last['world_size']:,} ranks {_d(last['exposed_comm_s'])} of it is exposed communication "
             f"and {_d(last['waiting_s'])} waiting for stragglers.")
    here = next((r for r in rows if r["world_size"] == chosen), None)
    if here is not None and here is not last:
        eff = f" ({share(here['efficiency'])} of one rank's throughput)" if here.get("efficiency") is not None else ""
        text += (f" The what-if's {chosen:,} ranks (the outlined bar): {_d(here['iteration_time_s'])}{eff}, "
                 f"{_d(here['waiting_s'])} of it waiting for stragglers.")
    if recorded is not None and any(r["world_size"] == recorded for r in rows):
        text += (f" Every size draws its ranks' speeds around the recorded medians, the recorded {recorded:,} ranks "
                 "too: that bar is not the replay of the recorded ranks above.")
    return text
