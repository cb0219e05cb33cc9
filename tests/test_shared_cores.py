"""A CPU recording whose ranks took turns on cores says so (``ddpsim.analysis.shared_cores``): in the
lines ``record`` and ``import`` print, and on the Timeline."""
import copy

from ddpsim.analysis.shared_cores import shared_cores_line
from ddpsim.cli.headline import headline_lines
from ddpsim.learn import learn
from ddpsim.samples import BUNDLED_DIR
from ddpsim.trace import load_trace

MLP = BUNDLED_DIR / "01_mlp_torch_default.json"  # 2 gloo ranks recorded on a 2-core machine


def with_cores(cpus: int, hosts=("vm", "vm")):
    """The bundled 2-rank recording as if its hosts had ``cpus`` cores (``meta.pinning`` as the recorder
    writes it) and rank r ran on ``hosts[r]``."""
    trace = load_trace(MLP)
    trace.meta["pinning"] = {**trace.meta["pinning"], "cpus": cpus}
    for r, host in zip(trace.ranks, hosts):
        r.host = host
    trace.meta["hosts"] = sorted(set(hosts))
    return trace


def test_ranks_with_a_core_each_say_nothing():
    assert load_trace(MLP).meta["pinning"]["cpus"] == 2
    assert shared_cores_line(load_trace(MLP)) is None
    assert not any("shared" in line for line in headline_lines(load_trace(MLP), "recorded"))


def test_two_ranks_on_one_core_are_named_in_the_headline():
    line = shared_cores_line(with_cores(1))
    assert line.startswith("2 ranks shared 1 CPU core on one host")
    assert "waiting for the operating system" in line
    assert headline_lines(with_cores(1), "recorded")[-1] == f"note: {line}"


def test_the_busiest_host_counts_on_several_hosts():
    assert shared_cores_line(with_cores(1, hosts=("a", "b"))) is None  # one rank per host, one core each
    assert shared_cores_line(with_cores(0)) is None  # no pinning recorded
    four = with_cores(2)
    four.ranks.extend(copy.deepcopy(four.ranks))  # 4 ranks: 3 on host a, 1 on host b
    for r, host in zip(four.ranks, ("a", "a", "a", "b")):
        r.host = host
    assert shared_cores_line(four).startswith("3 ranks shared 2 CPU cores on the busiest host")


def test_profiles_and_simulations_say_nothing():
    for name in ("10_h100_resnet18_gloo_2ranks.json", "20_sim_resnet50_v100-eth25_w64_default.json"):
        trace = load_trace(BUNDLED_DIR / name)
        trace.meta["pinning"] = {"cpus": 1}
        assert shared_cores_line(trace) is None, name


def test_the_timeline_says_the_ranks_shared_cores():
    from apputil import with_uploads

    at = with_uploads({"turns": with_cores(1), "own": load_trace(MLP)}, "timeline.py", "turns")
    assert not at.exception
    said = [c.value for c in at.caption if "shared 1 CPU core" in c.value]
    assert said == [f"2{shared_cores_line(with_cores(1))[1:]}."], [c.value for c in at.caption]
    at = with_uploads({"own": load_trace(MLP)}, "timeline.py", "own")
    assert not any("CPU core" in c.value for c in at.caption)


def test_the_what_if_replay_says_why_it_is_not_the_recorded_iterations():
    """Ranks that shared cores are simulated with drawn noise, not their recorded iterations (learn/noise.py):
    a 3-rank recording on 2 cores here replayed 9-37% off with no word of it on the What-if page. The line said
    nothing where no spread was measured (it keyed on the drawn noise, not on what replay_config did), and left
    out that the recorded ranks' median backward times are kept (``backward_scale``)."""
    from apputil import with_uploads

    def replay(label, trace):
        at = with_uploads({label: trace}, "whatif.py", label)
        assert not at.exception
        return next(c.value for c in at.caption if c.value.startswith("Replay error"))

    said = replay("turns", with_cores(1))
    work = learn(with_cores(1))
    each = ", ".join(f"rank {r} {f:.2f}x" for r, f in sorted(work.meta["rank_factors"].items()))
    assert (f"Not the recorded iterations replayed: its 2 ranks shared 1 CPU core, so the simulator shares the "
            f"cores itself. It plays 20 steps in which each rank's backward takes its recorded rank's median time "
            f"({each} the typical rank's), and each rank draws noise of the spread measured between the recorded ranks "
            f"({work.meta['jitter_estimated'] * 100:.1f}%).") in said
    assert "the unchanged configuration simulates at" in said  # not "replayed" beside "Not ... replayed"
    own = replay("own", load_trace(MLP))
    assert "Not the recorded" not in own and "configuration, replayed, simulates" in own  # a core each
    # ranks alike (rank 1 a copy of rank 0): no spread measured, and still not the recorded iterations replayed
    alike = with_cores(1)
    alike.ranks[1] = copy.deepcopy(alike.ranks[0])
    alike.ranks[1].rank = 1
    assert learn(alike).meta["jitter_estimated"] == 0
    said = replay("alike", alike)
    assert ("Not the recorded iterations replayed: its 2 ranks shared 1 CPU core, so the simulator shares the cores "
            "itself. It plays 20 steps in which each rank's backward takes its recorded rank's median time (rank 0 "
            "1.00x, rank 1 1.00x the typical rank's), and no rank noise is drawn (none was measured between the "
            "recorded ranks).") in said, said
