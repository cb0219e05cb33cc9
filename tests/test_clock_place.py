"""Ranks that share no allreduce with the largest group placed beside it by their steps (Note [A rank
no allreduce ties is placed by its steps] in ddpsim/trace/clock_place.py), on rank files built from
the bundled H100 ResNet-18 profiles (``test_clock_align_ranks.profile``: ProfilerSteps 4-6, step 4's
forward at 0 / 0.57 ms, step 5's at 78.9 / 80.6 ms, step 6's at 163.0 / 162.8 ms on the one clock the
two files share, each step 44.9 ms long).
"""
import pytest

from ddpsim.analysis import summarize
from ddpsim.trace.clock_place import WHY
from ddpsim.trace.profile_import import import_profiles
from test_clock_align import BIAS_NS
from test_clock_align_ranks import R18, profile, same_times

MS = 1_000_000


@pytest.fixture(scope="module")
def unmoved():
    return import_profiles(R18)


def caution(trace) -> str:
    said = [n for n in trace.meta["import_notes"] if "share no allreduce" in n]
    assert len(said) == 1, trace.meta["import_notes"]
    return said[0]


def forwards(trace, r: int) -> dict[int, int]:
    return {it.iteration: it.forward.start_ns for it in trace.ranks[r].iterations}


def test_the_largest_group_is_the_one_the_others_are_placed_against(tmp_path):
    """Ranks 0 (file 0) and 1 (file 1, +3.7 ms) profiled step 4, ranks 2-4 (files 0, 1, 0) step 6 on
    one clock: the three ranks are the main group, kept on the clock they share, and ranks 0-1 are
    the group placed beside them, moved by their own ends (their clocks differ)."""
    files = [profile(tmp_path, 0, 0, 0, 5, steps=(4,)), profile(tmp_path, 1, 1, 3700, 5, steps=(4,))]
    files += [profile(tmp_path, r % 2, r, 0, 5, steps=(6,)) for r in (2, 3, 4)]
    trace = import_profiles(files)
    clock = trace.meta["clock"]
    assert clock["method"] == "kineto-shared" and [g["ranks"] for g in clock["groups"]] == [[0, 1]]
    assert clock["placed_by"] == {"0": "first-forward", "1": "first-forward", "2": "kineto-shared",
                                  "3": "kineto-shared", "4": "kineto-shared"}
    assert abs(clock["groups"][0]["offsets_ns"]["1"] - 3.7 * MS) < BIAS_NS
    assert "rank(s) 0, 1 share no allreduce (by step, order and size) with rank(s) 2, 3, 4" in caution(trace)
    assert forwards(trace, 0)[4] < forwards(trace, 2)[6]  # step 4 before step 6


def test_a_group_on_clocks_of_its_own_is_placed_by_its_steps_after_the_main_groups(tmp_path, unmoved):
    """Ranks 0 and 1 on one clock profiled steps 4-5; ranks 2 (file 0) and 3 (file 1, +5 ms) step 6:
    the group's own clocks differ, so the profiles share no one clock ("own"), and its step 6 is put
    two of the main group's periods (78.9 ms) after its step 4: 157.9 ms, 5.1 ms before the truth,
    after the main group's step 5 ends (126.1 ms). Its offset is said, and its shift stored."""
    files = [profile(tmp_path, r, r, 0, 4, steps=(4, 5)) for r in (0, 1)]
    files += [profile(tmp_path, 0, 2, 0, 4, steps=(6,)), profile(tmp_path, 1, 3, 5000, 4, steps=(6,))]
    trace = import_profiles(files)
    clock, said = trace.meta["clock"], caution(trace)
    assert clock["placed_by"] == {"0": "kineto-shared", "1": "kineto-shared",
                                  "2": "first-forward", "3": "first-forward"}
    assert WHY["own"] in said and "rank(s) 2, 3, moved onto rank 2's clock by their ends (rank 3 +5.0" in said
    assert clock["placed_ns"].keys() == {"2", "3"} and clock["placed_ns"]["2"] == clock["placed_ns"]["3"]
    six = min(forwards(trace, 2)[6], forwards(trace, 3)[6])
    main_end = max(it.optimizer.end_ns for r in trace.ranks[:2] for it in r.iterations)
    assert main_end < six and abs(six - unmoved.ranks[1].iterations[2].forward.start_ns) < 6 * MS
    truth = unmoved.ranks[1].iterations[2].forward.start_ns - unmoved.ranks[0].iterations[2].forward.start_ns
    assert abs((forwards(trace, 3)[6] - forwards(trace, 2)[6]) - truth) < BIAS_NS  # on one clock by their ends


def test_a_rank_two_hours_off_is_placed_by_its_steps(tmp_path, unmoved):
    """Ranks 0 and 1 on one clock, rank 2 (file 1 without its allreduces) two hours later: "far", it
    is put at their step 4's first forward, the 2 h (and its 0.57 ms of waiting) stored as its shift."""
    trace = import_profiles([profile(tmp_path, 0, 0, 0, 3), profile(tmp_path, 1, 1, 0, 3),
                             profile(tmp_path, 1, 2, 7200e6, 3, allreduces=False)])
    clock = trace.meta["clock"]
    assert clock["placed_by"] == {"0": "kineto-shared", "1": "kineto-shared", "2": "first-forward"}
    assert WHY["far"] in caution(trace) and trace.ranks[2].clock_offset_ns == 0
    assert clock["placed_ns"] == {"2": 7200_000 * MS + unmoved.ranks[1].iterations[0].forward.start_ns}
    assert forwards(trace, 2)[4] == 0


def test_a_rank_without_allreduces_whose_steps_miss_the_others_is_placed_by_them(tmp_path, unmoved):
    """Ranks 0 and 1 on one clock, rank 2 file 0 50 ms later without its allreduces, ProfilerSteps 4-6
    as theirs: in one DDP job it ran the allreduces of the steps the others synchronised, so its steps
    must overlap theirs; they do not ("apart"), so it is put at their step 4: the iteration time is
    the two ranks' 44.9 ms, not 94.9 ms."""
    trace = import_profiles([profile(tmp_path, 0, 0, 0, 3), profile(tmp_path, 1, 1, 0, 3),
                             profile(tmp_path, 0, 2, 50_000, 3, allreduces=False)])
    clock = trace.meta["clock"]
    assert clock["placed_by"]["2"] == "first-forward" and WHY["apart"] in caution(trace)
    assert clock["placed_ns"] == {"2": 50 * MS}
    same_times(trace.ranks[2], unmoved.ranks[0], tol_ns=0)
    assert summarize(trace)["iteration_time_s"] == pytest.approx(summarize(unmoved)["iteration_time_s"], abs=1e-6)


def test_groups_with_no_step_in_common_keep_their_steps_order(tmp_path):
    """Three groups of two (files 0 and 1) at steps 4, 5 and 6, on six clocks: each later group is put
    one of the main group's step lengths (44.9 ms, its only step) per step number after it, in order."""
    shifts = [0, 3700, -2500, 12000, 800, -9000]
    trace = import_profiles([profile(tmp_path, r % 2, r, us, 6, steps=(4 + r // 2,)) for r, us in enumerate(shifts)])
    assert trace.meta["clock"]["placed_by"] == {"0": "collective-ends", "1": "collective-ends",
                                                **{str(r): "first-forward" for r in range(2, 6)}}
    firsts = [min(forwards(trace, 2 * g)[4 + g], forwards(trace, 2 * g + 1)[4 + g]) for g in range(3)]
    length = max(it.optimizer.end_ns for r in trace.ranks[:2] for it in r.iterations)
    assert firsts == [0, length, 2 * length]
