"""The What-if page's sentences about an ``whatif.Outcome`` (no Streamlit): the change against the
unchanged configuration, the model's error on the recorded run, and waiting for stragglers."""
from __future__ import annotations

from ddpsim.app import units, waiting


def describe_change(out) -> str:
    """One sentence: the change in iteration time, with the run's noise band."""
    ch = out.change["iteration_time_s"] * 100
    if out.summary["iteration_time_s"] == out.unchanged_summary["iteration_time_s"]:
        same = f"Iteration time {units.duration(out.summary['iteration_time_s'])}, the same as the configuration unchanged, both simulated"
        if (out.sim.meta.get("config") or {}) == (out.unchanged.meta.get("config") or {}):
            return same + ": move a control above to see what it changes."
        exposed = out.summary["exposed_comm_s"], out.unchanged_summary["exposed_comm_s"]
        if exposed[0] != exposed[1]:  # the buckets move the communication, not the iteration's end
            return same + (f": the choices above change how much communication is exposed "
                           f"({units.duration(exposed[1])} → {units.duration(exposed[0])}), not when the iteration ends.")
        return same + ": the choices above differ from the run as recorded, but change nothing in its simulation here."
    text = (f"Iteration time {units.change(ch / 100)} against the same configuration unchanged, both simulated "
            f"({units.duration(out.unchanged_summary['iteration_time_s'])} → {units.duration(out.summary['iteration_time_s'])})."
            + _drawn(out))
    if out.noise is None:
        why = ("a simulated run has none" if out.recorded_summary is None else
               f"the recorded run has {out.noise_iterations} steady synced iteration{'s' * (out.noise_iterations != 1)}")
        return text + f" No recorded spread to compare with ({why}): treat small changes with care."
    band = f"±{out.noise * 100:.0f}%"
    verdict = ("within" if out.within_noise else "larger than")
    return (text + f" The recorded run's single iterations vary by {band} (over {out.noise_iterations} "
            f"steady iterations): this change is {verdict} that spread"
            + (", so a measurement could not tell it apart from noise." if out.within_noise else "."))


def describe_replay(out) -> str | None:
    """The model's error on the recorded run itself (simulated unchanged vs recorded)."""
    if out.replay_error is None:
        return None
    e = out.replay_error["iteration_time_s"] * 100
    sim, rec = out.replayed, out.recorded_summary
    if "overlap_fraction" not in sim or "overlap_fraction" not in rec:
        overlap = ""
    elif not (sim.get("communicates", True) or rec.get("communicates", True)):  # as the metrics' "none"
        overlap = ", and no overlap to measure: no collective communicated"
    else:
        overlap = f", overlap {_overlap_pct(sim)} against {_overlap_pct(rec)}"
    drawn = "" if out.replay_summary is not None else waiting.drawn_replay(out.unchanged.meta)
    return (f"Replay error (the model's error on this run, not an effect of your change): the unchanged "
            f"configuration{'' if drawn else ', replayed,'} simulates at {sim['iteration_time_s'] * 1e3:.1f} ms per "
            f"iteration against {rec['iteration_time_s'] * 1e3:.1f} ms recorded ({e:+.1f}%); exposed "
            f"communication {sim['exposed_comm_s'] * 1e3:.2f} against {rec['exposed_comm_s'] * 1e3:.2f} ms{overlap}."
            + drawn)


REPLAY_FAR = 0.2  # fraction: a replay error beyond this is a warning, not a caption (not in torch)


def replay_far(out) -> str | None:
    """Where the model misses the recorded run by more than ``REPLAY_FAR``: what that means for the
    predictions, to show as a warning beside the replay line; else None."""
    if out.replay_error is None or abs(out.replay_error["iteration_time_s"]) <= REPLAY_FAR:
        return None
    return (f"The replay misses the recorded run by {out.replay_error['iteration_time_s']:+.0%}, beyond "
            f"{REPLAY_FAR:.0%}: the predictions on this page carry an error of that size. A network measured here "
            "beside other work (another test run, a recording) is a common cause: measure it again on an idle "
            "machine, or pick a network above.")


def _overlap_pct(summary: dict) -> str:
    """A summary's overlap as the metrics show it: "none" where no collective communicated."""
    return f"{summary['overlap_fraction']:.0%}" if summary.get("communicates", True) else "none"


def describe_stragglers(out) -> str | None:
    """How much of the what-if (and of its change) is waiting for the slowest rank; None without rank noise."""
    config, link = out.sim.meta.get("config") or {}, out.sim.meta.get("link") or {}  # link.cpus: cores the ranks share
    return waiting.describe(out.waits, (out.summary, out.unchanged_summary),
                            (out.sim.meta["world_size"], out.unchanged.meta["world_size"]), out.rank_spread,
                            out.spread_source, int(config.get("no_sync_every") or 1), link.get("cpus"), out.quiet_exposed)


def _drawn(out) -> str:
    """Where the what-if draws its ranks' speeds and the run at its own world size is replayed: what the
    unchanged run above is (Note [The unchanged run is simulated as the what-if is] in whatif.py)."""
    if out.replay_summary is None:
        return ""
    n = out.sim.meta["world_size"]
    drawn, replayed = out.unchanged_summary["iteration_time_s"], out.replay_summary["iteration_time_s"]
    return (f" At {n} rank{'s' * (n != 1)} there are no recorded ranks to replay step by step, so both draw each "
            f"rank's speed around the recorded medians: the unchanged run simulated so takes {units.duration(drawn)}, "
            f"replayed {units.duration(replayed)}, and that difference ({(drawn - replayed) * 1e3:+.1f} ms) comes from "
            "the way of simulating, not from your change.")
