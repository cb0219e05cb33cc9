"""The ladder: naive -> overlap -> bucketed -> torch's DDP, recorded interleaved and simulated."""
import pytest

from ddpsim.__main__ import main
from ddpsim.experiments.ladder import RUNGS, spread


def test_spread_is_median_and_quartiles():
    assert spread([4.0]) == {"median": 4.0, "p25": 4.0, "p75": 4.0}
    s = spread([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["p25"], s["p75"]) == (3.0, 2.0, 4.0)


@pytest.mark.parametrize("args, says", [
    (["--iters", "2"], "--iters must be >= 3"),
    (["--sim-iters", "0"], "--sim-iters must be between 1 and 1,000,000 synced steps, not 0"),  # after 4 rungs
    (["--out-dir", ""], "--out-dir wants a folder name, not an empty one"),
    (["--out-dir", "/proc/x"], "--out-dir /proc/x: /proc takes no new file"),  # it named ladder_naive.json.logs
    (["--world-size", "0"], "--world-size must be >= 1, not 0"),  # after the "recording 4 rungs" line
    (["--model", "nosuch"], "unknown model 'nosuch'"),
    (["--bucket-cap-mb", "-1"], "torch's bucket assignment refuses it (without it, or with static_graph, torch takes "
                                "it as no cap) (the bucketed rung)"),  # a rung's own find_unused, not the user's
])
def test_a_bad_flag_is_one_line_before_anything_is_recorded(capsys, tmp_path, monkeypatch, args, says):
    monkeypatch.chdir(tmp_path)  # where ./ladder/ would be recorded
    assert main(["ladder", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ddpsim ladder: error: ") and says in err and err.count("\n") == 1, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_ladder_records_four_rungs_interleaved_and_simulates_them(tmp_path, capsys):
    assert main(["ladder", "--model", "mlp", "--iters", "4", "--sim-iters", "4",
                 "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines()[1:13]]
    sources = ("measured", "replayed", "predicted")
    assert [(r[0], r[1]) for r in rows] == [(r.name, s) for r in RUNGS for s in sources]
    from ddpsim.trace import load_trace

    traces = {r.name: load_trace(tmp_path / f"ladder_{r.name}.json") for r in RUNGS}
    assert {n: t.meta["impl"] for n, t in traces.items()} == \
        {"naive": "naive", "overlap": "overlap", "bucketed": "minddp", "torch": "torch"}
    # taking turns: iteration i of every rung before iteration i + 1 of any
    spans = sorted((it.forward.start_ns, it.iteration, k)
                   for k, t in enumerate(traces.values()) for it in t.ranks[0].iterations)
    assert [(i, k) for _, i, k in spans] == [(i, k) for i in range(4) for k in range(4)]


def test_ladder_figure_has_a_bar_pair_per_rung_and_source():
    from ddpsim.viz import plot_ladder

    s = {"median": 10.0, "p25": 9.0, "p75": 12.0}
    rows = [{"rung": r.name, "source": src, "n": 5, "iteration_ms": s,
             "exposed_ms": {"median": 4.0, "p25": 3.0, "p75": 5.0}, "overlap": 0.5}
            for r in RUNGS for src in ("measured", "predicted")]
    fig = plot_ladder(rows)
    gids = {p.get_gid() for p in fig.axes[0].patches if p.get_gid()}
    assert gids == {f"ladder:{r.name}:{src}:{part}" for r in RUNGS for src in ("measured", "predicted")
                    for part in ("busy", "exposed")}


def test_naive_and_overlap_are_exclusive_in_the_simulator():
    import pytest

    from ddpsim.sim.api import SimConfig

    with pytest.raises(ValueError, match="choose one"):
        SimConfig(naive=True, overlap=True).validate()
