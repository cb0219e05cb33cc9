"""How much of a what-if's iteration is waiting for the slowest rank (Note [Waiting for the slowest rank]
in ddpsim/sim/stragglers.py), without Streamlit.

The rank-to-rank spread comes from the recording (``jitter_estimated``: between the ranks of each
recorded iteration; one recorded rank measures none: on GPU nodes it takes their profile's, elsewhere
the sentence says so) or, for a GPU model, from its GPU profile (``rank_spread``); at the recorded
world size, ranks that had a CPU core each keep their own measured speeds instead. Every rank then
waits for the expected slowest of the what-if's world size, and the wait is the iteration time with
the spread minus the same simulation without it (for the recorded ranks: with each micro-step's ranks
levelled to their mean, ``learn.noise.level``).
"""
from __future__ import annotations

from ddpsim.app.units import duration
from ddpsim.learn.extract import replays_recorded_ranks
from ddpsim.learn.hardware import profile_spread
from ddpsim.learn.noise import wait_and_quiet
from ddpsim.learn.replay_words import not_replayed, uneven_ranks
from ddpsim.sim.network import gpus
from ddpsim.sim.stragglers import slowest_factor

ONE_RANK = "the recording holds one rank"  # the end of rank_noise's source for a one-rank recording
OWN = "the recorded ranks' own speeds"  # rank_noise's source where a replay keeps each recorded rank's speed


def rank_noise(kind: str, gpu: str, work, world_size: int, hardware: str | None = None) -> tuple[float, str]:
    """(coefficient of variation between ranks, where it comes from) for a what-if at ``world_size``
    (a recording's on GPU nodes ``hardware``, if any); a replay of the recorded ranks draws no noise, and its
    spread is theirs, as measured."""
    if kind == "trace":
        if work is None:
            return 0.0, "none"
        measured = float(work.meta.get("jitter_estimated", 0.0)) if world_size > 1 else 0.0
        if replays_recorded_ranks(work, world_size):  # as replay_config simulates it
            return measured, OWN
        if (profile := profile_spread(work, hardware, world_size)):  # as replay_config takes it (learn/hardware.py)
            return profile, f"the {hardware.partition('-')[0]} GPU profile's, as {ONE_RANK}"
        return measured, _drawn_from(work, measured)
    return float(gpus().get(gpu, {}).get("rank_spread", 0.0)), f"the {gpu} GPU profile"


def _drawn_from(work, spread: float) -> str:
    """Where a recording's drawn spread comes from: its ranks when it holds two or more; one rank has
    nobody to differ from, so a spread there was not measured (learn's choice: none, or an assumed one)."""
    held = len(work.meta.get("recorded_ranks") or {}) or int(work.meta.get("recorded_world_size") or 1)
    if held >= 2:
        return "measured between the recorded ranks"
    return ("not measured" if spread > 0 else "none measured") + ": " + ONE_RANK


def waits_of(simulate_fn, work, what_if: tuple, unchanged: tuple) -> tuple[tuple[float, float], float]:
    """((seconds per iteration waiting for the slowest rank: what-if, unchanged), the what-if's exposed
    comm without its rank spread), each of ``what_if`` and ``unchanged`` a (SimConfig, its summary)."""
    w, quiet = wait_and_quiet(simulate_fn, work, *what_if)
    return (w, wait_and_quiet(simulate_fn, work, *unchanged)[0]), quiet["exposed_comm_s"]


def describe(waits: tuple[float, float], summaries: tuple[dict, dict], worlds: tuple[int, int],
             spread: float, source: str, micro_steps: int = 1, cpus: int | None = None,
             quiet_exposed: float | None = None) -> str | None:
    """One sentence on the waiting, what-if first; None when neither run has rank noise nor waits (a
    one-rank recording at more ranks says why none is included). ``cpus``: the CPU cores the what-if's
    ranks share, where they share them; ``quiet_exposed``: the what-if's exposed comm without the spread,
    said where the metric's, which counts the faster ranks' wait for the slowest, differs from it."""
    (w, w0), (s, s0), (n, n0) = waits, summaries, worlds
    if spread <= 0 and not (w or w0):
        return (f"Waiting for stragglers: not included at {n} ranks ({source}, so there is no rank-to-rank spread "
                "to draw from; the command line's `--jitter` sets one)." if n > 1 and source.endswith(ONE_RANK) else None)
    t, t0 = s["iteration_time_s"], s0["iteration_time_s"]
    if n == 1 or not s.get("communicates", True):  # nobody to wait for (no spread is simulated at one rank)
        why = "one rank waits for nobody" if n == 1 else "no collective makes a rank wait for another (the noop hook)"
        text = f"Waiting for stragglers: none, {why}; unchanged: {duration(w0, 2)} at {n0} rank{'s' * (n0 != 1)}."
    else:  # the slowest rank's lag grows with n; what it costs can shrink where communication sets the pace
        lag = slowest_factor(spread, n, micro_steps) - 1  # as the simulator plays it (sim/plan.py)
        hidden = _why_less(n, cpus) if w < lag * t / 2 and source != OWN else ""
        text = (f"Waiting for stragglers: {_slowest(n, spread, lag, micro_steps, source)}, which costs "
                f"{duration(w, 2)} of the what-if's {duration(t)} per iteration ({_share(w, t)}){hidden}; "
                f"unchanged: {duration(w0, 2)} at {n0} rank{'s' * (n0 != 1)}.")
        exposed = s.get("exposed_comm_s", 0.0)
        if quiet_exposed is not None and duration(quiet_exposed, 2) != duration(exposed, 2) and exposed > quiet_exposed:
            text += (f" The exposed communication above ({duration(exposed, 2)}) includes the time faster ranks wait "
                     f"in the allreduces for the slowest: without the spread it is {duration(quiet_exposed, 2)} (the "
                     "scaling figure's \"exposed\", beside its \"waiting\").")
    if t != t0 and (w or w0):
        text += " " + _part_of_change(w - w0, t - t0)
    return text


def _why_less(n: int, cpus: int | None) -> str:
    """Why the waiting costs less than the slowest rank's lag: communication sets the pace, or, where ranks
    share CPU cores, they take turns on them (sim/core.py), so a core's ranks' compute added up, not the
    slowest rank's, sets it (a 3-rank replay on 2 cores ran 0.73 ms faster with its drawn noise than without)."""
    shared = (f", and where ranks share CPU cores ({n} ranks on {cpus} here): the ranks on one core take turns, "
              "so their compute added up, not the slowest rank's, sets the pace") if cpus and n > cpus else ""
    return ", less where communication, not compute, sets the pace" + shared


def _part_of_change(dw: float, dt: float) -> str:
    """What waiting adds to (or takes from) the predicted change ``dt``: a share where both go the same
    way and the waiting is the smaller, else both times ("+6.09 ms (-2.1%)" read as a contradiction beside
    a change of -291 ms; so did waiting that "saves" time where more ranks make communication, not compute,
    set the pace, and "+2.21 ms (6837%)" of a change of +0.03 ms, where the rest got faster)."""
    if abs(dw) < 5e-6:  # under 0.005 ms: "-0.00 ms (-0%)" said nothing
        return f"Of the predicted change ({duration(dt, 2, '+')}), none is waiting for stragglers."
    if (dw > 0) == (dt > 0) and abs(dw) <= abs(dt):
        return f"Of the predicted change ({duration(dt, 2, '+')}), {duration(dw, 2, '+')} ({_share(dw, dt)}) is waiting for stragglers."
    return (f"Waiting for stragglers takes {duration(abs(dw), 2)} {'more' if dw > 0 else 'less'} than unchanged, against "
            f"the predicted change of {duration(dt, 2, '+')}: without it the change would be {duration(dt - dw, 2, '+')}.")


def _slowest(n: int, spread: float, lag: float, micro_steps: int, source: str) -> str:
    """Who is waited for, and where the spread comes from. A replay of the recorded ranks draws no lag:
    each recorded iteration's slowest rank is the one waited for (the drawn formula's lag is not theirs)."""
    if source == OWN:
        return (f"every rank waits for each recorded iteration's slowest of {n} ranks, the recorded ranks keeping "
                f"their own speeds (rank-to-rank spread {spread * 100:.1f}%, as measured between them)")
    if spread <= 0:
        return f"every rank waits for the slowest of {n} ({source})"
    window = f" (over {micro_steps} micro-steps)" if micro_steps > 1 else ""
    return (f"the slowest of {n} ranks computes about {lag * 100:.1f}% longer than the typical one{window} "
            f"(rank-to-rank spread {spread * 100:.1f}%, {source})")


def _share(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole``: one decimal under 10% (a "-0%" hid -0.3%)."""
    pct = part / whole * 100
    return f"{pct:.0f}%" if abs(pct) >= 10 else f"{pct:.1f}%"


def uneven_caution(work, world_size: int, hook: str | None = None) -> str | None:
    """A caution when the recorded ranks (``work``: a recording's Workload, or None) ran at lastingly
    different speeds (Note [Ranks are not equally fast] in learn/gradients.py) and the what-if is at
    another world size, where no rank is known to be that slow and drawn noise of the measured spread
    stands in: the waiting there is not the recorded one's.
    None where nobody waits (one rank, the noop hook)."""
    if (work is None or world_size == 1 or hook == "noop" or world_size == work.meta.get("recorded_world_size")
            or (each := uneven_ranks(work.meta)) is None):
        return None
    spread = float(work.meta.get("jitter_estimated", 0.0))
    instead = (f"each rank draws noise of the measured rank-to-rank spread instead ({spread * 100:.1f}%: how far "
               "the ranks' forward and backward compute differed within each recorded iteration)" if spread > 0
               else "every rank runs at the typical speed instead (no rank-to-rank spread was measured)")
    return (f"The recorded ranks did not run equally fast ({each} the typical rank's backward, over the whole "
            f"run). At {world_size} ranks no rank is known to be that slow: {instead}, so the waiting for the "
            "slowest rank is not the recorded run's (Waiting for stragglers, below).")


def drawn_replay(meta: dict) -> str:
    """Why a simulation at the recorded world size is not the recorded iterations replayed, and what it plays
    instead, read from what ``replay_config`` put in its config (``meta``: its trace's): no ``recorded_ranks``
    (Note [Replay the recorded ranks' speeds] in learn/noise.py), the recorded ranks' median backward times
    (``backward_scale``) and the drawn rank noise (``jitter``, none where no spread was measured); "" where
    it replays them (``learn.replay_words``)."""
    link = meta.get("link") or {}
    said = not_replayed(meta.get("config") or {}, int(meta.get("world_size") or 1), link.get("cpus"))
    return f" {said}" if said else ""
