"""``ddpsim sweep`` runs the What-if page's sweep and recommends what the page recommends.

The page's sweep tried torch's DDP_SET_LAST_BUCKET_CAP=1 (the small bucket last) and the command
line's did not: on ResNet-50, 64 V100s, 25 GbE the page named DDP_SET_LAST_BUCKET_CAP=1 at the
default cap (126.6 ms, SIMULATED) while ``sweep --trace`` with no grid flag simulated one row, the
run as it was (132.3 ms). Both now run ``ddpsim.learn.layout_sweep``.
"""
from __future__ import annotations

import json
import shlex

import pytest

from ddpsim import samples
from ddpsim.__main__ import main as cli
from ddpsim.app import command, sweep_verdict, whatif
from ddpsim.learn import layout_sweep
from ddpsim.trace import load_trace

SAMPLE = str(samples.BUNDLED_DIR / "20_sim_resnet50_v100-eth25_w64_default.json")
LAYOUT = ("bucket_cap_mb", "order", "find_unused_parameters", "last_bucket_small")


def page_sweep(path: str):
    """The rows and recommendation the What-if page shows for ``path``, nothing changed (pages/whatif.py)."""
    trace = load_trace(path)
    base = whatif.base_for(trace)
    work = whatif.workload(base, trace)
    c = whatif.choices(base)
    cfg = whatif.sim_config(base, None, "torch", False, c["no_sync_every"], c["world_size"], c["network"],
                            trace_ranks=whatif.SWEEP_RANKS, work=work, trace=trace, algo=c["algo"],
                            broadcast_buffers=c["broadcast_buffers"])
    rows, _ = layout_sweep.sweep_rows(work, cfg)
    return rows, sweep_verdict.recommend(rows)


def run(capsys, *argv) -> tuple[list[str], str]:
    assert cli(["sweep", *argv]) == 0
    out, err = capsys.readouterr()
    return out.strip().splitlines(), err


def test_the_command_line_recommends_what_the_page_does_on_sample_20(capsys, tmp_path):
    table = tmp_path / "rows.json"
    lines, _ = run(capsys, "--trace", SAMPLE, "--out", str(table))
    best = json.loads(lines[-1])
    page_rows, page_best = page_sweep(SAMPLE)
    assert {k: best[k] for k in LAYOUT} == {k: page_best[k] for k in LAYOUT} == {
        "bucket_cap_mb": None, "order": "torch", "find_unused_parameters": False, "last_bucket_small": True}
    assert best["iteration_time_s"] == pytest.approx(page_best["iteration_time_s"], abs=1e-9)
    assert best["iteration_time_s"] * 1e3 == pytest.approx(126.6, abs=0.05)
    words = lines[-2]
    assert "DDP_SET_LAST_BUCKET_CAP=1" in words and "126.6 ms/iteration" in words and "SIMULATED" in words
    rows = json.loads(table.read_text())  # the same 77 layouts
    assert len(rows) == whatif.SWEEP_RUNS == 77
    assert sorted(map(layout, rows), key=str) == sorted(map(layout, page_rows), key=str)


def layout(row: dict) -> tuple:
    return tuple(row[k] for k in LAYOUT)


def test_the_pages_gpu_model_on_the_command_line_gives_every_row_of_the_page(capsys, tmp_path):
    """A simulated sample is its GPU model on the page; "The same on the command line" writes it as
    ``--trace`` with the controls moved: with ``sweep`` for ``simulate``, each row as the page has it."""
    base = whatif.base_for(load_trace(SAMPLE), SAMPLE)
    args = shlex.split(command.simulate_command(base, SAMPLE, None, "torch", False, 1, 64, base.network))
    assert args[3:] == ["simulate", "--trace", SAMPLE, "--world-size", "64"], args
    table = tmp_path / "rows.json"
    run(capsys, *args[4:], "--out", str(table))
    page_rows, _ = page_sweep(SAMPLE)
    page = {layout(r): (r["iteration_time_s"], r["rank"]) for r in page_rows}
    rows = json.loads(table.read_text())
    assert len(rows) == len(page) and all(
        page[layout(r)] == (pytest.approx(r["iteration_time_s"], abs=1e-9), r["rank"]) for r in rows)


def test_a_fixed_find_unused_and_an_explicit_grid(capsys):
    lines, _ = run(capsys, "--trace", SAMPLE, "--find-unused-parameters", "--bucket-cap-mb", "25")
    assert len(lines) == 4 and "DDP_SET_LAST_BUCKET_CAP" not in lines[-2]  # a grid: only what is given
    lines, _ = run(capsys, "--trace", SAMPLE, "--no-find-unused-parameters", "--world-size", "64")
    rows = lines[1:-2]
    assert len(rows) == (len(whatif.SWEEP_CAPS) + 1) * 4  # per cap (and the default): 3 orders, small last
    assert json.loads(lines[-1])["last_bucket_small"] is True
    lines, _ = run(capsys, "--trace", SAMPLE, "--bucket-cap-mb", "default,5", "--last-bucket-small", "off,on")
    assert len(lines) == 7 and "DDP_SET_LAST_BUCKET_CAP=1" in lines[-2]


def test_help_says_what_the_sweep_tries(capsys):
    with pytest.raises(SystemExit):
        cli(["sweep", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "What-if page's sweep" in text and "DDP_SET_LAST_BUCKET_CAP=1" in text and "--last-bucket-small" in text


def test_unused_parameters_without_find_unused_are_a_note_and_a_bad_option_an_error():
    """The page showed a refused combination as a note (unused parameters: torch fails without
    find_unused_parameters); an option out of range is the user's error, raised as the simulator says it."""
    import dataclasses

    from ddpsim.sim import SimConfig, synthetic

    w = synthetic("resnet50", "v100-eth25")
    cfg = SimConfig(world_size=8, iters=2)
    unused = dataclasses.replace(w, ready_order=list(w.ready_order[:-1]), grad_compute_s=list(w.grad_compute_s[:-1]),
                                 unused=[w.ready_order[-1]])
    rows, notes = layout_sweep.sweep_rows(unused, cfg, caps=(5.0,), orders=("torch",))
    assert [r["find_unused_parameters"] for r in rows] == [True, True] and rows[0]["best"] != rows[1]["best"]
    assert len(notes) == 1 and notes[0].startswith("find_unused_parameters=False: 1 parameter(s) never receive")
    with pytest.raises(ValueError, match="latency"):
        layout_sweep.sweep_rows(w, cfg, caps=(5.0,), orders=("torch",), grid={"latency_us": [1.0, 1e300]})


def test_the_command_lines_verdict_follows_the_pages_rules():
    """``ddpsim sweep`` named a "best" among 77 rows that all simulated 57.5 ms (a 1-rank import), and a
    best ordering DDP does not offer without a word: the page says neither."""
    from ddpsim.learn.layout_sweep import describe_best, rank

    def row(order, cap, t):
        return {"bucket_cap_mb": cap, "order": order, "find_unused_parameters": False, "last_bucket_small": False,
                "iteration_time_s": t, "exposed_comm_s": 0.0}
    tie = rank([row("torch", None, 0.0575), row("random", 5.0, 0.05751)])
    assert describe_best(tie[0], tie).startswith("no best (SIMULATED): all 2 configurations simulate alike, 57.5 ms")
    apart = rank([row("random", 5.0, 0.0600), row("torch", 10.0, 0.0620)])
    said = describe_best(apart[0], apart)
    assert said.startswith("best (SIMULATED): bucket_cap_mb=5, order=random"), said
    assert "order=random is not a DDP option" in said and said.endswith(
        "with torch's ordering: bucket_cap_mb=10, order=torch, find_unused_parameters=False: 62.0 ms/iteration, "
        "0.0 ms exposed communication"), said


def test_a_grid_on_a_powersgd_gloo_recording_is_cautioned_not_crashed(tmp_path, capsys):
    """``sweep --trace P --bucket-cap-mb 1,100`` on a gloo PowerSGD recording ended in KeyError:
    'find_unused_parameters' (a grid's rows do not carry the run's setting)."""
    import json as _json

    from ddpsim.cli import main
    from ddpsim.samples import sample_path
    raw = _json.loads(sample_path("01_mlp_torch_default").read_text())
    raw["meta"]["options"]["comm_hook"] = "powersgd"  # the MLP's gloo run, swept as if it had used PowerSGD
    path = tmp_path / "p.json"
    path.write_text(_json.dumps(raw))
    assert main(["sweep", "--trace", str(path), "--bucket-cap-mb", "1"]) == 0
    out = capsys.readouterr().out
    best = _json.loads(out.strip().splitlines()[-1])
    assert best["n_buckets"] > 1 and "Caution: on gloo, this run's backend, torch's powerSGD_hook aborts" in out


def test_one_row_is_a_best_and_an_ordering_torch_never_builds_is_named_without_a_torch_row():
    from ddpsim.learn.layout_sweep import describe_best, rank

    one = rank([{"bucket_cap_mb": 25.0, "iteration_time_s": 0.0407, "exposed_comm_s": 0.01}])
    assert describe_best(one[0], one).startswith("best (SIMULATED): bucket_cap_mb=25: 40.7 ms")
    rows = rank([{"bucket_cap_mb": 1.0, "order": o, "iteration_time_s": t, "exposed_comm_s": 0.0}
                 for o, t in (("definition", 0.0410), ("random", 0.0407))])
    assert describe_best(rows[1], rows).endswith("order=random " + __import__(
        "ddpsim.learn.layout_sweep", fromlist=["NOT_DDP"]).NOT_DDP)
