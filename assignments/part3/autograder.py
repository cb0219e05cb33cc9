"""Part 3 autograder: predict with the simulator, then measure with a real run.

The autograder recomputes the simulator's sweep for the given model and network (the baseline
trace in this folder) and checks the student's rows and choice against its own numbers, not the
student's; then it runs the student's ``confirm`` and checks that the trace is a real run made
now (its creation time falls inside the call) whose buckets were built under the chosen cap.

Run: python -m ddpsim.grade part3 path/to/predict.py [--json results.json]
"""
from __future__ import annotations

import datetime
import math
import re

from ddpsim import load_trace
from ddpsim.analysis import summarize
from ddpsim.grade import assignments_dir, points

BASELINE = assignments_dir() / "part3" / "baseline.json"
CANDIDATES_MB = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 25]
WORLD_SIZE = 2
MODEL = "transformer"
TOLERANCE = 0.03  # a choice within 3% of the best simulated iteration time is accepted
LINK = {"shared_core": False, "bandwidth_gbps": 0.25, "latency_us": 3000.0}  # as in predict.py
ROW_TOLERANCE = 0.01  # the student's simulated times must match the autograder's within 1%
MIB = 1024 * 1024


def simulator_rows(ctx, link: dict | None = None):
    """The autograder's own sweep on the baseline: this machine, or over ``link``."""
    def compute():
        from ddpsim.learn import sweep, workload_from_trace
        from ddpsim.sim import SimConfig

        w = workload_from_trace(load_trace(BASELINE))
        return sweep(w, {"bucket_cap_mb": CANDIDATES_MB},
                     SimConfig(world_size=WORLD_SIZE, iters=4, **(link or {})))
    return ctx.shared(f"rows {link}", compute)


def check_choice(rows, pick, where: str) -> str:
    best = min(rows, key=lambda r: r["iteration_time_s"])
    row = next((r for r in rows if math.isclose(float(r["bucket_cap_mb"]), pick)), None)
    assert row is not None, f"{pick} MiB is not one of the candidates {CANDIDATES_MB}"
    slower = row["iteration_time_s"] / best["iteration_time_s"] - 1
    assert slower <= TOLERANCE, (
        f"{where}, {pick} MiB is predicted {slower:.0%} slower than the optimum {best['bucket_cap_mb']} "
        f"MiB ({row['iteration_time_s'] * 1e3:.1f} ms vs {best['iteration_time_s'] * 1e3:.1f} ms)")
    return f"passed: {pick} MiB, predicted {row['iteration_time_s'] * 1e3:.1f} ms/iteration {where}"


def chosen(ctx) -> float:
    return ctx.shared("chosen", lambda: float(ctx.student.choose_bucket_cap_mb()))


def real_trace(ctx):
    """(trace, when confirm was called, when it returned): UTC, whole seconds."""
    def compute():
        out = ctx.tmp / "part3_run.json"
        start = _utc_now().replace(microsecond=0)
        ctx.student.confirm(out)
        end = _utc_now()
        assert out.is_file(), f"confirm(out_path) did not write a trace to {out}"
        return load_trace(out), start, end
    return ctx.shared("trace", compute)


def _utc_now():
    return datetime.datetime.now(datetime.timezone.utc)


@points(3, name="predict_sweep covers every candidate cap")
def test_sweep_rows(ctx):
    rows = ctx.student.predict_sweep()
    caps = sorted(float(r["bucket_cap_mb"]) for r in rows)
    assert caps == sorted(map(float, CANDIDATES_MB)), \
        f"expected one row per candidate {CANDIDATES_MB}, got caps {caps}"
    assert all(math.isfinite(r["iteration_time_s"]) and r["iteration_time_s"] > 0 for r in rows), \
        "every row needs a positive iteration_time_s"
    ours = {float(r["bucket_cap_mb"]): r["iteration_time_s"] for r in simulator_rows(ctx)}
    for r in rows:
        want = ours[float(r["bucket_cap_mb"])]
        assert math.isclose(r["iteration_time_s"], want, rel_tol=ROW_TOLERANCE), (
            f"cap {r['bucket_cap_mb']} MiB: your row says {r['iteration_time_s'] * 1e3:.2f} ms, the "
            f"simulator on the baseline says {want * 1e3:.2f} ms (use workload_from_trace(BASELINE) "
            f"and SimConfig(world_size={WORLD_SIZE}, iters=SIM_ITERS))")


@points(2, name="this machine: the chosen cap is the simulator's optimum (within 3%)")
def test_choice(ctx):
    return check_choice(simulator_rows(ctx), chosen(ctx), "on this machine")


@points(4, name="over LINK: the chosen cap is the simulator's optimum (within 3%)")
def test_link_choice(ctx):
    return check_choice(simulator_rows(ctx, LINK), float(ctx.student.choose_link_cap_mb()),
                        "over LINK")


@points(3, name="written answer (80-200 words; content graded by hand)")
def test_answer(ctx):
    text = getattr(ctx.student, "ANSWER", "") or ""
    if "TODO" in text:
        raise NotImplementedError("TODO 3: write ANSWER in predict.py")
    words = len(re.findall(r"[A-Za-z0-9.]+", text))
    assert 80 <= words <= 260, f"ANSWER has {words} words; write 80-200"
    return f"passed: {words} words (the content is read by the instructor)"


@points(5, name="the real run: a complete trace that matches the config")
def test_real_run(ctx):
    trace, start, end = real_trace(ctx)
    pick = chosen(ctx)
    cfg = trace.meta.get("config", {})
    assert trace.source == "real" and trace.complete, "the trace is not a complete real run"
    created = _created(trace)
    assert created is not None and start <= created <= end, (
        f"the trace was created at {trace.meta.get('created')}, not during this call of confirm "
        f"({start:%H:%M:%S} to {end:%H:%M:%S} UTC): confirm must record a new run")
    assert cfg.get("model") == MODEL, f"the run trained {cfg.get('model')!r}, not {MODEL!r}"
    assert trace.world_size == WORLD_SIZE, f"the run had {trace.world_size} ranks, not {WORLD_SIZE}"
    cap = cfg.get("bucket_cap_mb")
    assert cap is not None and math.isclose(float(cap), pick), \
        f"the run used bucket_cap_mb={cap}, but the chosen cap is {pick}"
    rank = trace.ranks[0]
    last = rank.layouts[-1]
    caps = {b.cap_bytes for b in last.buckets if b.cap_bytes is not None}
    assert not caps or caps == {int(pick * MIB)}, \
        f"the run's buckets were built under caps {sorted(caps)} bytes, not {int(pick * MIB)}"
    too_small = [b.index for b in last.buckets if b.bytes < int(pick * MIB)]
    assert len(too_small) <= 1, (f"buckets {too_small} hold less than the {pick} MiB cap, though "
                                 "only a layout's leftover bucket may: not a run at this cap")
    measured = summarize(trace)["iteration_time_s"]
    row = next(r for r in simulator_rows(ctx) if math.isclose(float(r["bucket_cap_mb"]), pick))
    return (f"passed: measured {measured * 1e3:.1f} ms/iteration, predicted "
            f"{row['iteration_time_s'] * 1e3:.1f} ms ({len(last.buckets)} buckets)")


def _created(trace):
    try:
        t = datetime.datetime.fromisoformat(str(trace.meta.get("created")))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=datetime.timezone.utc)
