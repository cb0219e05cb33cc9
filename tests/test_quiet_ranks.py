"""A trace in which some ranks recorded no iteration: the simulator learns from the others, and says so
(``simulate`` printed its prediction from rank 1 alone without a word; the What-if page likewise)."""
import copy
import json
import subprocess
import sys
from pathlib import Path

from ddpsim.app import whatif
from ddpsim.trace import from_dict, quiet_ranks

FIXTURES = Path(__file__).parent / "fixtures"
RAW = json.loads((FIXTURES / "tiny_trace.json").read_text())


def without_iterations(*ranks, error=None):
    raw = copy.deepcopy(RAW)
    for r in raw["ranks"]:
        if r["rank"] in ranks:
            r.update(iterations=[], complete=error is None, error=error)
    return raw


def test_quiet_ranks_are_named_with_those_learned_from():
    assert quiet_ranks(from_dict(RAW)) is None
    assert quiet_ranks(from_dict(without_iterations(0))) == (
        "Rank(s) 0 recorded no iteration: the workload is learned from rank(s) 1 alone.")
    assert quiet_ranks(from_dict(without_iterations(1, error="RuntimeError: boom"))).startswith("Rank(s) 1 recorded")
    assert quiet_ranks(from_dict(without_iterations(0, 1))) is None  # nothing learned: other messages say so


def test_simulate_and_the_whatif_say_which_ranks_were_learned_from(tmp_path):
    raw = without_iterations(0, error="RuntimeError: boom")
    path = tmp_path / "rank0_failed.json"
    path.write_text(json.dumps(raw))
    run = subprocess.run([sys.executable, "-m", "ddpsim", "simulate", "--trace", str(path)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "note: rank(s) 0 recorded no iteration: the workload is learned from rank(s) 1 alone." in run.stderr
    trace = from_dict(raw)
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    cfg = whatif.sim_config(base, work=work, trace=trace)
    assert any(c.startswith("Rank(s) 0 recorded no iteration") for c in whatif.cautions(base, trace, cfg, work))
    assert not any("recorded no iteration" in c for c in whatif.cautions(base, from_dict(RAW), cfg, work))
