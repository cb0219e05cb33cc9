"""The ladder: naive -> overlap -> bucketed -> torch's DDP, recorded interleaved and simulated."""
import pytest

from ddpsim.__main__ import main
from ddpsim.ladder import RUNGS, spread


def test_spread_is_median_and_quartiles():
    assert spread([4.0]) == {"median": 4.0, "p25": 4.0, "p75": 4.0}
    s = spread([1.0, 2.0, 3.0, 4.0, 5.0])
    assert (s["median"], s["p25"], s["p75"]) == (3.0, 2.0, 4.0)


def test_too_few_iterations_is_one_line_error(capsys):
    assert main(["ladder", "--iters", "2"]) == 2
    assert "--iters must be >= 3" in capsys.readouterr().err


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
