"""Note [A no_sync step computes alone] (learn/refine.py): a replay plays a recording's no_sync
micro-steps at the forward and backward they measured, not at the synced steps' learnt compute.

Two real 2-rank gloo recordings: the bundled convnet with a sync every 3 steps, and branchy with
find_unused_parameters, a sync every 2 steps and 1 MiB buckets (tests/fixtures/no_sync, recorded on
the 2-core machine on 2026-11-29 with ``ddpsim record --model branchy --world-size 2 --iters 20
--find-unused-parameters --no-sync-every 2 --bucket-cap-mb 1``). Before the fit, their replays
played the no_sync backward 16% short (convnet) and 24% short (branchy), and branchy's replay
missed its iteration time by -11.1%.
"""
from pathlib import Path

import pytest

from ddpsim.analysis import summarize
from ddpsim.analysis.phases import no_sync_medians
from ddpsim.learn import learn, replay_config, simulate
from ddpsim.samples import sample_path
from ddpsim.trace import load_trace

RECORDINGS = [sample_path("05_convnet_torch_no_sync3.json"),
              Path(__file__).parent / "fixtures" / "no_sync" / "branchy_find_unused_no_sync2.json"]


@pytest.fixture(scope="module", params=RECORDINGS, ids=lambda p: Path(p).stem)
def replayed(request):
    real = load_trace(request.param)
    w = learn(real)
    sim, summary = simulate(w, replay_config(w, real))
    return real, w, sim, summary


def test_the_replay_plays_the_recorded_no_sync_steps(replayed):
    real, _, sim, _ = replayed
    recorded, played = no_sync_medians(real), no_sync_medians(sim)
    for part in ("forward", "backward"):
        assert played[part] == pytest.approx(recorded[part], rel=0.03), (part, played, recorded)


def test_the_replay_of_a_no_sync_run_is_close(replayed):
    real, _, _, summary = replayed
    measured = summarize(real)["iteration_time_s"]
    assert summary["iteration_time_s"] == pytest.approx(measured, rel=0.05)


def test_the_synced_steps_keep_the_learnt_compute(replayed):
    _, w, _, _ = replayed
    assert w.micro_step_scale(True) == (1.0, 1.0)
    assert w.micro_step_scale(False) == (w.no_sync_forward_scale, w.no_sync_backward_scale)
    assert w.meta["refined"]["no_sync_backward_scale"] == w.no_sync_backward_scale != 1.0


def test_a_run_without_no_sync_steps_is_not_scaled():
    real = load_trace(sample_path("01_mlp_torch_default.json"))
    assert no_sync_medians(real) is None
    w = learn(real)
    assert (w.no_sync_forward_scale, w.no_sync_backward_scale) == (1.0, 1.0)


def test_a_noop_what_if_keeps_the_recorded_no_sync_steps(replayed):
    """A no_sync micro-step sends nothing with any hook, so a noop what-if plays it as the replay does:
    the noop's compute alone (learn/alone.py) scales the synced steps only (on the convnet both
    multiplied, its no_sync backward read 61.30 ms against the 61.81 ms recorded and replayed)."""
    real, w, sim, _ = replayed
    noop, _ = simulate(w, replay_config(w, real, comm_hook="noop"))
    for part in ("forward", "backward"):
        assert no_sync_medians(noop)[part] == pytest.approx(no_sync_medians(sim)[part], rel=1e-6), part


def test_a_noop_what_if_is_not_slower_than_the_replay(replayed):
    """Without any collective the iteration is no slower (the convnet's read 111.3 ms against the
    replay's 105.2 ms: its ranks' waits at the buffer broadcast were counted twice, analysis/metrics.py)."""
    real, w, _, summary = replayed
    _, noop = simulate(w, replay_config(w, real, comm_hook="noop"))
    assert noop["iteration_time_s"] < summary["iteration_time_s"]
