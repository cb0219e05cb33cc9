"""A sweep simulates each planned run once: configurations that build the same buckets and differ in
nothing else share one simulation (Note [Configurations that build the same buckets] in
ddpsim/sim/sweep.py), and every row still holds what its own configuration simulates to; its progress
counts every configuration, and ``ddpsim sweep`` draws it on a terminal."""
import os
import pty
import subprocess
import sys
from dataclasses import asdict

import pytest

from ddpsim.learn import learn
from ddpsim.learn.layout_sweep import SWEEP_RUNS, sweep_rows
from ddpsim.samples import sample_path
from ddpsim.sim import SimConfig, simulate
from ddpsim.sim.sweep import METRICS, planned, same_run, sweep
from ddpsim.trace import load_trace

BASE = SimConfig(world_size=4, iters=4, jitter=0.05)  # noise on: rows must not share a draw they would not
GRID = {"bucket_cap_mb": [0.01, 1.0, 50.0, 100.0], "order": ["torch", "random"], "find_unused_parameters": [False, True]}


@pytest.fixture(scope="module")
def work():
    return learn(load_trace(sample_path("01_mlp_torch_default.json")))


def own(work, values: dict) -> dict:
    _, s = simulate(work, SimConfig(**{**asdict(BASE), **values}))
    return {m: s[m] for m in METRICS} | {"n_buckets": s["n_buckets"]}


def test_every_row_is_what_its_own_configuration_simulates_to(work):
    rows = sweep(work, GRID, BASE)
    assert len(rows) == 16
    for r in rows:
        values = {k: r[k] for k in GRID}
        assert {k: r[k] for k in (*METRICS, "n_buckets")} == own(work, values), values


def test_caps_above_the_model_plan_one_run_and_other_fields_do_not(work):
    model_mib = sum(p.bytes for p in work.params) / 2**20
    assert model_mib < 50  # the fixture: caps 50 and 100 both build one bucket
    key = lambda **kw: same_run(work, SimConfig(**{**asdict(BASE), **kw}))  # noqa: E731
    assert key(bucket_cap_mb=50.0) == key(bucket_cap_mb=100.0)
    assert key(bucket_cap_mb=50.0, order="random") == key(bucket_cap_mb=100.0, order="random")
    assert key(bucket_cap_mb=0.01) != key(bucket_cap_mb=1.0)  # several buckets: other layouts
    assert key(bucket_cap_mb=50.0) != key(bucket_cap_mb=50.0, find_unused_parameters=True)
    assert key(bucket_cap_mb=50.0) != key(bucket_cap_mb=50.0, seed=BASE.seed + 1)
    assert key(bucket_cap_mb=50.0) != key(bucket_cap_mb=50.0, world_size=8)


def test_planned_names_the_runs_the_sweep_simulates_without_simulating(work):
    """What the What-if page's estimate of a sweep's time counts (``layout_sweep.expected_seconds``)."""
    done: dict = {}
    sweep(work, GRID, BASE, done=done)
    assert set(done) == planned(work, GRID, BASE)
    assert len(done) == 12  # 16 configurations: caps 50 and 100 build one bucket in each of the 4 others' ways


def test_progress_counts_every_configuration_once_to_the_total(work):
    seen: list = []
    rows, _ = sweep_rows(work, BASE, progress=lambda done, total: seen.append((done, total)))
    assert len(rows) == SWEEP_RUNS == 77
    assert seen == [(n, 77) for n in range(1, 78)]


def test_a_refused_configuration_is_listed_and_counted_or_raised(work):
    grid = {"jitter": [-1.0, 0.05]}  # a negative spread: the simulator refuses it
    refused, seen = [], []
    rows = sweep(work, grid, BASE, refused=refused, progress=lambda n, total: seen.append((n, total)))
    assert [r["jitter"] for r in rows] == [0.05] and rows[0]["best"]
    assert refused == [({"jitter": -1.0}, "jitter must be a finite number >= 0, not -1.0")]
    assert seen == [(1, 2), (2, 2)]
    with pytest.raises(ValueError, match="^jitter must be"):
        sweep(work, grid, BASE)


def test_the_sweep_command_draws_its_bar_on_a_terminal_only():
    """``ddpsim sweep`` on a terminal: "simulating [###...] 77/77 configurations" on stderr, as ``record``
    and ``scaling`` draw theirs; into a pipe, its lines alone."""
    cmd = [sys.executable, "-m", "ddpsim", "sweep", "--trace", str(sample_path("01_mlp_torch_default.json")),
           "--iters", "3"]
    lead, follow = pty.openpty()
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=follow) as proc:
        os.close(follow)  # the child holds the terminal's other end now
        said = b""
        try:
            while chunk := os.read(lead, 65536):  # read as it draws: a full terminal would block it
                said += chunk
        except OSError:  # EIO: the child closed its end, all read
            pass
        finally:
            os.close(lead)
        out = proc.stdout.read()
    assert proc.wait(timeout=300) == 0
    assert "] 77/77 configurations" in said.decode() and "simulating [" in said.decode()
    piped = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and "configurations" not in piped.stderr and piped.stdout == out.decode()
