"""Several ranks put on one clock from the ends of the allreduces they ran together (Note [A
collective ends at once on every rank] in ddpsim/trace/clock_align.py): every rank's allreduces
count, not only the lowest rank's; ranks that share allreduces only among themselves are put on one
clock of their own (Note [Ranks join a clock through the allreduces they share] in
ddpsim/trace/clock_groups.py); a rank that shares none is placed by its steps (Note [A rank no
allreduce ties is placed by its steps] in ddpsim/trace/clock_place.py).

Built at the level of the importer's input: the bundled H100 ResNet-18 profiles (two gloo ranks on
one host, one clock, ProfilerSteps 4-6 with 3 allreduces each) copied into 3 or 4 rank files, each
with its rank id in ``distributedInfo``, its own clock shift and its own profiling window (the events
of the steps outside it dropped). A copy of a file is the same rank's profile on another clock, so
after the import two copies of one file must coincide, and each must land where the unmoved import
put its file, within the ends' bias (60 us on these profiles, test_clock_align.BIAS_NS).
"""
import gzip
import json

import pytest

from ddpsim.analysis import summarize
from ddpsim.trace.clock_align import CLOCK
from ddpsim.trace.profile_import import import_profiles
from ddpsim.trace.profile_meta import CAUTION
from test_clock_align import BIAS_NS, R18, spans

STEP = "ProfilerStep#"
ALLREDUCE_OPS = {"c10d::allreduce_", "gloo:all_reduce", "record_param_comms"}


def profile(tmp_path, src: int, rank: int, us: float, world: int, steps=(4, 5, 6), allreduces=True):
    """File ``src``'s profile as rank ``rank`` of ``world``, every timestamp ``us`` later, holding the
    events of ProfilerSteps ``steps`` only (a window cut short), without its allreduces if not ``allreduces``."""
    data = json.loads(gzip.decompress(R18[src].read_bytes()))
    starts = {int(e["name"][len(STEP):]): e["ts"] for e in data["traceEvents"]
              if str(e.get("name", "")).startswith(STEP) and e.get("cat") == "user_annotation"}
    lo = starts[min(steps)] if min(steps) > min(starts) else float("-inf")
    hi = starts[max(steps) + 1] if max(steps) < max(starts) else float("inf")
    timed = [e for e in data["traceEvents"] if isinstance(e.get("ts"), (int, float))]
    data["traceEvents"] = [e for e in data["traceEvents"] if not isinstance(e.get("ts"), (int, float))] + [
        {**e, "ts": e["ts"] + us} for e in timed
        if lo <= e["ts"] < hi and (allreduces or e.get("name") not in ALLREDUCE_OPS)]
    data["distributedInfo"].update(rank=rank, world_size=world)
    out = tmp_path / f"rank{rank}.json"
    out.write_text(json.dumps(data))
    return out


@pytest.fixture(scope="module")
def unmoved():
    return import_profiles(R18)


def same_times(got, want, tol_ns: int) -> None:
    """The ranks' steps of one number start within ``tol_ns`` and last as long (ns rounding)."""
    by_step = {it.iteration: it for it in want.iterations}
    for it in got.iterations:
        for (a0, a1), (b0, b1) in zip(spans(it), spans(by_step[it.iteration])):
            assert abs(a0 - b0) <= tol_ns and abs((a1 - a0) - (b1 - b0)) <= 2, (got.rank, it.iteration)


@pytest.mark.parametrize("rank3_steps", [(5, 6), (6,)])
def test_every_rank_counts_when_the_lowest_rank_shares_few_allreduces(tmp_path, unmoved, rank3_steps):
    """Rank 0 (file 0) profiled steps 4-5 only; rank 1 (file 1, +3.7 ms) and rank 2 (file 0, -2.5 ms)
    all three; rank 3 (file 1, +12 ms) steps 5-6 or step 6 only. Rank 3 is moved onto rank 1's clock
    (the rank whose allreduces the most others ran) by the 6 or 3 allreduces they share, so the two
    copies of file 1 coincide to the nanosecond, and every rank is within the ends' bias of the truth."""
    files = [profile(tmp_path, 0, 0, 0, 4, steps=(4, 5)), profile(tmp_path, 1, 1, 3700, 4),
             profile(tmp_path, 0, 2, -2500, 4), profile(tmp_path, 1, 3, 12000, 4, steps=rank3_steps)]
    trace = import_profiles(files)
    clock = trace.meta["clock"]
    assert clock["method"] == "collective-ends" and clock["reference"] == 1
    assert clock["placed_by"] == {str(r): "collective-ends" for r in range(4)}
    truth = {0: 0, 1: 3.7e6, 2: -2.5e6, 3: 12e6}  # ns: each rank's clock shift
    found = clock["offsets_ns"]
    assert found["3"] - found["1"] == 8_300_000  # the copies of file 1: exactly their shifts' difference
    for r in range(4):  # from rank 2, the full window of file 0 (rank 0's 6 allreduces put it 32 us off its copy)
        assert abs((found[str(r)] - found["2"]) - (truth[r] - truth[2])) < BIAS_NS, (r, found)
    same_times(trace.ranks[3], trace.ranks[1], tol_ns=2)
    for r in range(4):
        same_times(trace.ranks[r], unmoved.ranks[r % 2], tol_ns=BIAS_NS)
    said = [n for n in trace.meta["import_notes"] if n.startswith(CLOCK)]
    assert len(said) == 1 and "moved onto rank 1's" in said[0] and "rank 3 +8.300 ms" in said[0]


def test_ranks_that_share_no_allreduce_with_the_reference_are_placed_through_the_others(tmp_path):
    """A chain of windows: rank 0 (file 0) step 4, rank 1 (file 1, +3.7 ms) steps 4-5, rank 2 (file 0,
    -2.5 ms) steps 5-6, rank 3 (file 1, +12 ms) step 6. Rank 3 shares no allreduce with the reference
    (rank 1) but step 6's with rank 2, moved already: it is moved by those ends. Each offset rests on
    one step's 3 allreduces, so it is off the truth by up to 130 us here, within the middle half's
    width the import gives (``skew_ns``, 242 us)."""
    files = [profile(tmp_path, 0, 0, 0, 4, steps=(4,)), profile(tmp_path, 1, 1, 3700, 4, steps=(4, 5)),
             profile(tmp_path, 0, 2, -2500, 4, steps=(5, 6)), profile(tmp_path, 1, 3, 12000, 4, steps=(6,))]
    clock = import_profiles(files).meta["clock"]
    assert clock["method"] == "collective-ends" and clock["reference"] == 1
    truth = {0: -3.7e6, 1: 0, 2: -6.2e6, 3: 8.3e6}  # ns: each rank's clock minus rank 1's
    for r in range(4):
        assert abs(clock["offsets_ns"][str(r)] - truth[r]) <= clock["skew_ns"], (r, clock)


@pytest.mark.parametrize("lone_us", [0.0, 3700.0, 7200e6])
def test_a_rank_without_allreduces_beside_ranks_on_two_clocks_is_put_at_their_first_forward(tmp_path, unmoved, lone_us):
    """Ranks 0 and 1 (files 0 and 1, rank 1 on a clock 3.7 ms ahead) and rank 2 (file 1 without its
    allreduces) on rank 0's clock, on rank 1's or two hours off: rank 1 is moved back by the ends it
    shares with rank 0; no clock is known to be rank 2's, so its first forward is put at the others'
    of that step, wherever its clock was: 0.5 ms before its copy (rank 1), and the iteration time is
    the two ranks' own. Rank 0's clock would put it 3.8 ms after its copy when on rank 1's clock, and
    the iteration 3.6 ms longer."""
    files = [profile(tmp_path, 0, 0, 0, 3), profile(tmp_path, 1, 1, 3700, 3),
             profile(tmp_path, 1, 2, lone_us, 3, allreduces=False)]
    trace = import_profiles(files)
    clock = trace.meta["clock"]
    assert clock["method"] == "collective-ends" and abs(clock["offsets_ns"]["1"] - 3.7e6) < BIAS_NS
    for r in (0, 1):
        same_times(trace.ranks[r], unmoved.ranks[r], tol_ns=BIAS_NS)
    first = [r.iterations[0].forward.start_ns for r in trace.ranks]
    assert first[2] == first[0] == 0 and first[1] - first[2] < 0.6e6  # ns: its copy's wait for rank 0
    assert summarize(trace)["iteration_time_s"] == pytest.approx(summarize(unmoved)["iteration_time_s"], abs=BIAS_NS / 1e9)
    assert clock["placed_by"] == {"0": "collective-ends", "1": "collective-ends", "2": "first-forward"}
    assert "2" not in clock["offsets_ns"] and trace.ranks[2].clock_offset_ns == 0
    said = [n for n in trace.meta["import_notes"] if "share no allreduce" in n]
    assert len(said) == 1 and said[0].startswith(CAUTION + CLOCK), trace.meta["import_notes"]
    assert "rank(s) 2 share no allreduce (by step, order and size) with rank(s) 0, 1" in said[0]
    assert "rank(s) 2 aligned at the first forward" in said[0] and "the others' clocks differ" in said[0]
    assert "clock the profiles share" not in said[0]


def test_a_rank_without_allreduces_beside_ranks_on_one_clock_keeps_it(tmp_path, unmoved):
    """The three ranks on the clock they share, rank 2 without allreduces: all keep it, and the
    caution says why: rank 2's steps overlap the others' synchronised steps 4-6, as one DDP job's
    must (a rank cannot skip the allreduces the others ran, whether or not its profile holds them)."""
    trace = import_profiles([profile(tmp_path, 0, 0, 0, 3), profile(tmp_path, 1, 1, 0, 3),
                             profile(tmp_path, 1, 2, 0, 3, allreduces=False)])
    clock = trace.meta["clock"]
    assert clock["method"] == "kineto-shared" and set(clock["placed_by"].values()) == {"kineto-shared"}
    for r in range(3):
        same_times(trace.ranks[r], unmoved.ranks[min(r, 1)], tol_ns=2)
    said = [n for n in trace.meta["import_notes"] if "share no allreduce" in n]
    assert len(said) == 1 and said[0].startswith(CAUTION + "rank(s) 2 share no allreduce (by step, order and size) "
                                                 "with rank(s) 0, 1: rank(s) 2 kept on the clock the profiles share "
                                                 "(their first step within 600 s of the others', their steps overlapping the "
                                                 "others' synchronised steps of the same numbers)")


@pytest.mark.parametrize("shifts_us", [(0, 0, 0, 0), (0, 3700, -2500, 12000)])
def test_ranks_that_share_allreduces_only_among_themselves_are_put_on_one_clock(tmp_path, unmoved, shifts_us):
    """Ranks 0 (file 0) and 1 (file 1) profiled step 4 only, ranks 2 (file 0) and 3 (file 1) step 6
    only, all on one clock or on four: ranks 2 and 3 share step 6's three allreduces, so rank 3 is
    put on rank 2's clock by their ends (a group of its own, meta.clock.groups), and their step-6
    forwards start as far apart as the unmoved files' (0.2 ms; 14.3 ms on their own clocks). No
    allreduce ties the two groups: on one clock the second keeps it, said to rest on its first step
    alone (no step in common to check), on four it is put at the first group's first forward plus two
    of its step periods (its one step's length, 44.9 ms), after the first group's step 4."""
    files = [profile(tmp_path, r % 2, r, us, 4, steps=(4,) if r < 2 else (6,)) for r, us in enumerate(shifts_us)]
    trace = import_profiles(files)
    clock, kept = trace.meta["clock"], shifts_us[3] == 0
    forward = {r: {it.iteration: it.forward.start_ns for it in trace.ranks[r].iterations} for r in range(4)}
    truth = {r: {it.iteration: it.forward.start_ns for it in unmoved.ranks[r].iterations} for r in (0, 1)}
    assert abs((forward[3][6] - forward[2][6]) - (truth[1][6] - truth[0][6])) < BIAS_NS
    assert [g["ranks"] for g in clock["groups"]] == [[2, 3]] and clock["groups"][0]["reference"] == 2
    assert clock["placed_by"] == {"0": clock["method"], "1": clock["method"], "2": "kineto-shared" if kept else
                                  "first-forward", "3": "kineto-shared" if kept else "first-forward"}
    assert clock["groups"][0]["offsets_ns"] == ({} if kept else {"2": 0, "3": trace.ranks[3].clock_offset_ns})
    assert abs(trace.ranks[3].clock_offset_ns - (shifts_us[3] - shifts_us[2]) * 1e3) < (BIAS_NS if not kept else 1)
    if kept:
        for r in range(4):
            same_times(trace.ranks[r], unmoved.ranks[r % 2], tol_ns=2)
    else:
        step4 = max(it.optimizer.end_ns for r in trace.ranks[:2] for it in r.iterations)
        assert min(forward[2][6], forward[3][6]) == 2 * step4  # no step in common: two step periods on
        assert clock["placed_ns"].keys() == {"2", "3"}
    said = [n for n in trace.meta["import_notes"] if "share no allreduce" in n]
    assert len(said) == 1 and "rank(s) 2, 3 share no allreduce (by step, order and size) with rank(s) 0, 1" in said[0]
    assert "overlapping" not in said[0]
    assert ("none of their steps is numbered as a step the others synchronised" if kept
            else "the others' clocks differ") in said[0]
    assert ("rank(s) 2, 3, their ends on one clock" if kept else
            f"rank(s) 2, 3, moved onto rank 2's clock by their ends (rank 3 "
            f"+{clock['groups'][0]['offsets_ns']['3'] / 1e6:.3f} ms)") in said[0]
