"""An import keeps its GPU's busy compute kernels (HTA's own rule picks them), its overlap figure takes
compute to be them, and a simulation learnt from it lays them over its own phases, so the replay gives
the recording's figure back (Notes [Compute is the GPU's busy kernels], [The recorded busy time,
stretched])."""
import dataclasses
import gzip
import json

import pytest

from ddpsim import samples
from ddpsim.analysis import summarize
from ddpsim.analysis.busy import MIN_GAP_NS, lay_busy, lay_over, pattern_of
from ddpsim.learn import learn, replay_config, simulate
from ddpsim.trace import (GradReady, Iteration, RankTrace, Span, Trace, TraceFormatError, from_dict, load_trace,
                          save_trace)
from ddpsim.trace.profile_import import import_profiles

hta_utils = pytest.importorskip("hta.utils.utils")
PROFILES = [samples.H100_DIR / f"resnet18_gloo_ws2_rank{r}.kineto.json.gz" for r in (0, 1)]


@pytest.fixture(scope="module")
def imported():
    return import_profiles(PROFILES)


def raw_busy_ns(path) -> list[tuple[int, int]]:
    """The profile's compute kernels as HTA classifies them (``get_kernel_type``), merged, in ns."""
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    spans = sorted((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)) for e in events
                   if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                   and hta_utils.get_kernel_type(e["name"]) == "COMPUTATION")
    out = []
    for s, e in spans:
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def clock_shift(inner, raw) -> int:
    """The shift from the import's clock to the profile's: where the first span's length and the gap
    to the next one match a raw span's (to the nanosecond the microsecond floats round to)."""
    a, b = inner[0], inner[1]
    return next(s0 - a.start_ns for (s0, e0), (s1, _) in zip(raw, raw[1:])
                if abs(e0 - s0 - a.duration_ns) <= 2 and abs(s1 - s0 - (b.start_ns - a.start_ns)) <= 2)


def test_the_busy_spans_are_the_profiles_compute_kernels(imported):
    """Inside each iteration (its first and last spans may be cut at the iteration's edges) every busy
    span is one of the raw profile's merged compute spans, moved by the import's one clock shift."""
    for rank, path in zip(imported.ranks, PROFILES):
        raw = raw_busy_ns(path)
        length = {s + k: e - s for s, e in raw for k in (-2, -1, 0, 1, 2)}
        shift = clock_shift(rank.iterations[0].compute_busy[1:-1], raw)
        for it in rank.iterations:
            inner = it.compute_busy[1:-1]
            assert len(inner) > 300
            for b in inner:
                assert abs(length.get(b.start_ns + shift, -99) - b.duration_ns) <= 2, (rank.rank, it.iteration, b)


def test_the_overlap_takes_compute_to_be_the_busy_kernels(imported):
    busy = summarize(imported)["overlap_fraction"]
    whole = summarize(dataclasses.replace(imported, ranks=[
        dataclasses.replace(r, iterations=[dataclasses.replace(it, compute_busy=None) for it in r.iterations])
        for r in imported.ranks]))["overlap_fraction"]
    assert 0.15 < busy < 0.25 and whole > 0.55  # the GPU idles between one rank's kernels


def test_the_replay_gives_the_recordings_figure_back(imported):
    w = learn(imported)
    assert w.busy is not None and len(w.busy) == 2
    _, replayed = simulate(w, replay_config(w, imported))
    recorded = summarize(imported)["overlap_fraction"]
    assert abs(replayed["overlap_fraction"] - recorded) < 0.02, (replayed["overlap_fraction"], recorded)
    _, flat = simulate(dataclasses.replace(w, busy=None), replay_config(w, imported))
    assert flat["overlap_fraction"] - recorded > 0.3  # busy all through: the 60% of before


def iteration(fwd, bwd, grads, opt, busy=None, sync=True) -> Iteration:
    return Iteration(0, sync, Span(*fwd), Span(*bwd), Span(*opt), [GradReady(t, p) for p, t in grads], [],
                     compute_busy=None if busy is None else [Span(*b) for b in busy])


def us(*spans):
    """Spans given in microseconds, in ns."""
    return [(a * 1000, b * 1000) for a, b in spans]


def test_a_phase_made_longer_keeps_its_share_of_idle_time():
    recorded = iteration(*us((0, 100), (100, 300)), [(1, 200_000), (0, 300_000)], *us((400, 500)),
                         busy=us((0, 50), (100, 150), (250, 300), (350, 400), (400, 500)))
    pattern = pattern_of(recorded)
    assert pattern["forward"] == [(0.0, 0.5)] and pattern["backward"] == [(0.0, 0.25), (0.75, 1.0)]
    assert pattern["after"] == [(50_000, 0)] and pattern["optimizer"] == [(0.0, 1.0)]  # after: ns before its end
    longer = iteration(*us((0, 200), (200, 600)), [(1, 400_000), (0, 600_000)], *us((800, 900)))
    assert [(s.start_ns, s.end_ns) for s in lay_over(longer, pattern)] == us((0, 100), (200, 300), (500, 600), (750, 900))


def test_gaps_between_back_to_back_kernels_stay_busy_in_a_simulation():
    """Gaps under MIN_GAP_NS (most are the microsecond or two between back-to-back launches) close."""
    recorded = iteration(*us((0, 100), (100, 300)), [(0, 300_000)], *us((300, 400)),
                         busy=[(0, 10_000), (10_000 + MIN_GAP_NS - 1, 20_000), (30_000, 100_000)])
    assert pattern_of(recorded)["forward"] == [(0.0, 0.2), (0.3, 1.0)]


def test_the_wait_after_the_last_gradient_is_not_counted_as_compute(imported):
    """The time after the last gradient is mostly the wait for the allreduces: a longer wait is idle
    (stretched, or busy by default, it counted exposed communication as overlapped: 84% at 64 ranks)."""
    w = learn(imported)
    cfg = replay_config(w, imported, hardware="h100-eth25", world_size=64)
    _, laid = simulate(w, cfg)
    _, whole = simulate(dataclasses.replace(w, busy=None), cfg)
    assert laid["exposed_comm_s"] > 0.02 and laid["overlap_fraction"] < whole["overlap_fraction"] < 0.3
    no_after = [[{k: v for k, v in p.items() if k != "after"} for p in rank] for rank in w.busy]
    _, missing = simulate(dataclasses.replace(w, busy=no_after), cfg)
    assert missing["overlap_fraction"] < whole["overlap_fraction"]


def test_a_simulated_step_takes_a_recorded_step_of_its_kind():
    patterns = [[{"sync": False, "forward": [(0.0, 0.5)]}, {"sync": True, "forward": [(0.5, 1.0)]}]]
    its = [dataclasses.replace(iteration((k * 1000, k * 1000 + 100), (k * 1000 + 100, k * 1000 + 300),
                                         [(0, k * 1000 + 300)], (k * 1000 + 300, k * 1000 + 400), sync=k % 2 == 1),
                               iteration=k) for k in range(4)]
    trace = Trace("simulated", {}, [], [RankTrace(rank=r, host="", layouts=[], iterations=its) for r in (0, 1)])
    lay_busy(trace, patterns)  # rank 1 shares rank 0's iterations: laid once
    forward = [[(s - it.forward.start_ns, e - it.forward.start_ns) for s, e in it.busy(it.forward.start_ns, it.forward.end_ns)]
               for it in its]
    assert forward == [[(0, 50)], [(50, 100)], [(0, 50)], [(50, 100)]]


def test_busy_spans_read_back_and_bad_ones_are_one_line(imported, tmp_path):
    save_trace(imported, tmp_path / "t.json")
    again = load_trace(tmp_path / "t.json")
    assert again.ranks[1].iterations[2].compute_busy == imported.ranks[1].iterations[2].compute_busy
    d = imported.to_dict()
    d["ranks"][0]["iterations"][1]["compute_busy"][3] = dict(d["ranks"][0]["iterations"][1]["compute_busy"][2])
    with pytest.raises(TraceFormatError) as e:
        from_dict(d)
    assert len(str(e.value).splitlines()) == 1 and "ranks[0].iterations[1].compute_busy" in str(e.value)
    assert "overlap or are out of time order" in str(e.value)
    assert load_trace(samples.BUNDLED_DIR / "01_mlp_torch_default.json").ranks[0].iterations[0].compute_busy is None
