"""Profiles of several hosts put on one clock from the ends of their allreduces
(Note [A collective ends at once on every rank] in ddpsim/trace/clock_align.py).

The known truth: the bundled H100 ResNet-18 profiles (two gloo ranks on one host) share one clock
exactly. Rank 1's whole profile is moved by a known offset, as another host's clock would be, and
the import must find the offset again and give the unmoved import's times. A slow rank (a
hand-made trace whose rank 1 computes later while the allreduces end together) must stay slow.
"""
import gzip
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from ddpsim.samples import H100_DIR
from ddpsim.trace.clock_align import CLOCK, END
from ddpsim.trace.profile_import import import_profiles
from ddpsim.trace.profile_meta import align

R18 = [H100_DIR / f"resnet18_gloo_ws2_rank{r}.kineto.json.gz" for r in (0, 1)]
# On one clock the two ranks' 9 gloo allreduces end a median of +59.8 us apart (middle half 119 us
# wide): the estimate is off the truth by that much, whatever the shift.
BIAS_NS = 80_000
MS = 1_000_000


def moved(tmp_path, us: float, renumber: int = 0):
    """Rank 1's profile with every timestamp ``us`` later (its steps renumbered by ``renumber``)."""
    data = json.loads(gzip.decompress(R18[1].read_bytes()))
    for e in data["traceEvents"]:
        if isinstance(e.get("ts"), (int, float)):
            e["ts"] += us
        if renumber and str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + renumber}"
    out = tmp_path / f"rank1_{us:+.0f}us.json"
    out.write_text(json.dumps(data))
    return out


@pytest.fixture(scope="module")
def unmoved():
    return import_profiles(R18)


def spans(it):
    """Every span of an iteration the Timeline draws, as (start, end) in ns."""
    out = [(it.forward.start_ns, it.forward.end_ns), (it.backward.start_ns, it.backward.end_ns),
           (it.optimizer.start_ns, it.optimizer.end_ns)]
    return out + [(b.launch_ns, b.complete_ns) for b in it.buckets]


def test_the_one_clock_profiles_keep_their_shared_clock(unmoved):
    clock = unmoved.meta["clock"]
    assert clock == {"method": "kineto-shared", "skew_ns": 0, "offsets_ns": {},
                     "placed_by": {"0": "kineto-shared", "1": "kineto-shared"}}
    assert [r.clock_offset_ns for r in unmoved.ranks] == [0, 0]
    assert not [n for n in unmoved.meta["import_notes"] if n.startswith(CLOCK)]


@pytest.mark.parametrize("shift_ms", [0.8, 3.7, -12.0, 2 * 3600e3])
def test_a_rank_on_another_clock_is_moved_back_by_the_allreduces_ends(tmp_path, unmoved, shift_ms):
    """Less than a step (0.8, 3.7 ms), more (-12 ms: the steps no longer overlap), and two hours."""
    trace = import_profiles([R18[0], moved(tmp_path, shift_ms * 1e3)])
    clock = trace.meta["clock"]
    assert clock["method"] == "collective-ends" and clock["offsets_ns"]["0"] == 0
    found = clock["offsets_ns"]["1"]
    assert abs(found - shift_ms * MS) < BIAS_NS and abs(found - shift_ms * MS) <= clock["skew_ns"]
    assert [r.clock_offset_ns for r in trace.ranks] == [0, found]
    said = [n for n in trace.meta["import_notes"] if n.startswith(CLOCK)]
    assert len(said) == 1 and "ends of the 9 allreduces" in said[0] and "rank 1 " in said[0]
    for r in (0, 1):
        for got, want in zip(trace.ranks[r].iterations, unmoved.ranks[r].iterations):
            for (a0, a1), (b0, b1) in zip(spans(got), spans(want)):
                assert abs(a0 - b0) < BIAS_NS and abs((a1 - a0) - (b1 - b0)) <= 2  # ns: rounding only


def test_the_cli_says_how_the_clocks_were_moved(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ddpsim", "import", str(R18[0]), str(moved(tmp_path, 3700.0)),
                          "--out", str(tmp_path / "t.json")], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if x.startswith(CLOCK))
    assert "rank 1 +3.760 ms (middle half 0.119 ms wide)" in line


def test_without_a_matching_allreduce_each_rank_starts_at_its_first_forward_and_it_is_said(tmp_path):
    """Rank 1's steps numbered apart from rank 0's and two hours later: no allreduce to match."""
    trace = import_profiles([R18[0], moved(tmp_path, 7200e6, renumber=100)])
    assert trace.meta["clock"]["method"] == "first-forward"
    said = [n for n in trace.meta["import_notes"] if n.startswith("caution: no allreduce matches across ranks")]
    assert len(said) == 1 and "7200 s apart" in said[0]


def _rank(rank: int, clock_ns: int, late_ns: int, steps: int = 6, drift_ns=lambda s: 0) -> dict:
    """A rank's iterations as the import has them before ``align``: each 100 ms step's forward
    starts ``late_ns`` / 2 late and its compute takes ``late_ns`` / 2 longer, but its three
    allreduces end when every rank's do (a few us apart); all on a clock ``clock_ns`` ahead."""
    its = []
    for s in range(steps):
        t = s * 100 * MS + clock_ns
        f0, b0, b1 = t + late_ns // 2, t + 30 * MS + late_ns, t + 85 * MS
        buckets = [{"bucket": k, "bytes": 4 << 20, "ready_ns": b0 + (10 + 10 * k) * MS,
                    "launch_ns": b0 + (10 + 10 * k) * MS,
                    "complete_ns": t + (70 + 5 * k) * MS + 3000 * rank * (s % 3) + drift_ns(s),
                    END: t + (70 + 5 * k) * MS + 3000 * rank * (s % 3) + drift_ns(s)} for k in range(3)]
        its.append({"iteration": s, "sync": True, "forward": {"start_ns": f0, "end_ns": b0},
                    "backward": {"start_ns": b0, "end_ns": b1}, "buckets": buckets,
                    "optimizer": {"start_ns": b1, "end_ns": b1 + 5 * MS}})
    return {"rank": rank, "clock_offset_ns": 0, "iterations": its}


def late_launch_ms(ranks) -> float:
    """How much later rank 1 launches its first allreduce than rank 0, in ms (the first step)."""
    return (ranks[1]["iterations"][0]["buckets"][0]["launch_ns"]
            - ranks[0]["iterations"][0]["buckets"][0]["launch_ns"]) / MS


@pytest.mark.parametrize("clock_ms", [0.0, 3.7])
def test_a_slow_rank_is_not_made_fast(clock_ms):
    """Rank 1 computes 6 ms later than rank 0 and its allreduces end with rank 0's: on one clock
    it is left as it is; on a clock 3.7 ms ahead it is moved by 3.7 ms, not by its 6 ms of lateness."""
    ranks = [_rank(0, 0, 0), _rank(1, int(clock_ms * MS), 6 * MS)]
    clock, said = align(ranks)
    if clock_ms == 0:
        assert clock["method"] == "kineto-shared" and said is None
    else:
        assert clock["method"] == "collective-ends" and abs(clock["offsets_ns"]["1"] - 3.7 * MS) <= 3000
    assert late_launch_ms(ranks) == pytest.approx(6.0, abs=0.01)  # ms: the estimate is off by the ends' 3 us
    assert ranks[0]["iterations"][0]["forward"]["start_ns"] == 0  # t = 0: the earliest first forward


@pytest.mark.parametrize("clock_ms", [0.0, 3.7])
def test_ends_that_do_not_meet_on_any_clock_are_said_to_be_perhaps_two_runs(clock_ms):
    """Rank 1's allreduces end 1 ms before rank 0's in one step and 1 ms after in the next (two runs'
    steps, or a busy host): no one clock makes them meet, and the import says so rather than align
    them quietly; with an offset the clock is still moved by it."""
    ranks = [_rank(0, 0, 0), _rank(1, int(clock_ms * MS), 0, drift_ns=lambda s: (1 if s % 2 else -1) * MS)]
    clock, said = align(ranks)
    assert said is not None and said.startswith("caution: ") and "ends scatter over 2.0 ms" in said, said
    assert "where one job's ends fall within about a message's latency" in said
    assert clock["method"] == ("kineto-shared" if clock_ms == 0 else "collective-ends")
