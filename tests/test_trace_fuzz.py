"""Property-based fuzzing of the trace reader and everything that reads a trace.

Each case is a real trace (hand-made, recorded, simulated, partial) with 1-3
mutations (a value replaced, a key removed, a span reversed, a list emptied...)
or a damaged text (truncated, deeply nested, a huge integer). The property:
``parse_trace`` either raises TraceFormatError or returns a trace that every
consumer handles - the analysis summary, ``export --chrome`` (strict JSON, integers inside int64),
the simulator and the What-if page's simulation (their output traces load back), and the figures
the dashboard draws - returning a result or one of ddpsim's plain
errors (PartialTraceError for a valid trace that holds too little,
SimulationTooLarge). Any other exception, or a case running past HANG_S, fails.

A few hundred cases run by default; the slow test runs MANY (1,000; DDPSIM_FUZZ_CASES=10000 for the
ten thousand the reader was hardened on, about 8 minutes here) in WORKERS processes and, with
DDPSIM_FUZZ_REPORT=path, appends the tally (cases, outcomes per consumer) there as a JSON line.
The cases are the same on every run (derandomized; each share of the slow test a fixed seed);
DDPSIM_FUZZ_RANDOM=1 draws new ones (how the reader was hardened: run it often).
"""
from __future__ import annotations

import copy
import json
import multiprocessing
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ddpsim import TraceFormatError, parse_trace
from ddpsim.errors import PartialTraceError

ROOT = Path(__file__).resolve().parent.parent
HANG_S = 20  # seconds one case may take before it counts as a hang
WORKERS = 2  # processes the slow test's cases are shared over (the CI machine's cores)
MANY = int(os.environ.get("DDPSIM_FUZZ_CASES", "1000"))  # the slow test's cases (2,000 cost CI a minute)


class Hang(Exception):
    pass


def _bases() -> dict[str, dict]:
    from ddpsim.learn import simulate
    from ddpsim.sim.api import SimConfig
    from ddpsim.trace import load_trace

    bases = {name: json.loads((ROOT / path).read_text()) for name, path in [
        ("fixture", "tests/fixtures/tiny_trace.json"),
        ("mlp", "ddpsim/samples/01_mlp_torch_default.json"),
        ("branchy", "ddpsim/samples/04_branchy_torch_find_unused.json"),
        ("no_sync", "ddpsim/samples/05_convnet_torch_no_sync3.json")]}
    sim, _ = simulate(load_trace(ROOT / "tests/fixtures/tiny_trace.json"), SimConfig(world_size=4, iters=3))
    bases["simulated"] = json.loads(json.dumps(sim.to_dict()))
    from ddpsim.sim.archs import synthetic

    gpu, _ = simulate(synthetic("resnet50", "v100-eth25"), SimConfig(world_size=16, iters=2, trace_ranks=2))
    bases["simulated_gpu"] = json.loads(json.dumps(gpu.to_dict()))  # the What-if page reads its workload spec
    partial = copy.deepcopy(bases["fixture"])  # a run stopped before its first iteration
    for r in partial["ranks"]:
        r.update(iterations=[], layouts=[], complete=False, error="hung: stopped while starting python")
    bases["partial"] = partial
    half = copy.deepcopy(bases["mlp"])  # one rank died after two iterations
    half["ranks"][1].update(iterations=half["ranks"][1]["iterations"][:2], complete=False,
                            error="died from signal SIGKILL")
    bases["half"] = half
    return bases


BASES = _bases()

SCALARS = st.one_of(
    st.none(), st.booleans(), st.sampled_from(["", "false", "true", "1", "-1", "nan", "real", "simulated"]),
    st.integers(-2**70, 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63 - 1, 2**63, -2**63, 10**18]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.5, -0.5, 1e300, -1e-300, 1e-300]),
    st.text(max_size=8))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                      max_leaves=6)


def _slots(obj, out, depth=0):
    """Every (container, key) in ``obj``: the places a mutation can hit."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        out.append((obj, k))
        _slots(v, out, depth + 1)
    return out


def _mutate(draw, raw) -> None:
    slots = _slots(raw, [])
    holder, key = slots[draw(st.integers(0, len(slots) - 1))]
    op = draw(st.sampled_from(["replace", "delete", "negate", "reverse_span", "empty", "copy",
                               "bump", "bump", "flip", "drop", "drop", "swap", "same_type", "same_type"]))
    value = holder[key]
    if op == "flip" and isinstance(value, bool):
        holder[key] = not value
    elif op == "drop" and isinstance(value, list) and value:
        del value[draw(st.integers(0, len(value) - 1))]
    elif op == "swap" and isinstance(value, list) and len(value) > 1:
        i, j = draw(st.integers(0, len(value) - 1)), draw(st.integers(0, len(value) - 1))
        value[i], value[j] = value[j], value[i]
    elif op == "same_type" and type(value) is int:  # a plausible but different value
        holder[key] = draw(st.integers(0, max(2 * value, 8)))
    elif op == "same_type" and type(value) is float:
        holder[key] = draw(st.floats(0, max(2 * value, 1.0)))
    elif op == "same_type" and isinstance(value, str):
        holder[key] = draw(st.sampled_from(["", "x", "gloo", "nccl", "rebuilt", "construction", value * 2]))
    elif op == "replace":
        holder[key] = draw(VALUES)
    elif op == "delete":
        del holder[key]
    elif op == "negate" and isinstance(value, (int, float)) and not isinstance(value, bool):
        holder[key] = -value - 1
    elif op == "bump" and isinstance(value, int) and not isinstance(value, bool):
        holder[key] = value + draw(st.sampled_from([1, 2, 1000, 10**6, 10**9, 10**12, 2**62, -1, -10**6]))
    elif op == "reverse_span" and isinstance(value, dict) and "start_ns" in value and "end_ns" in value:
        value["start_ns"], value["end_ns"] = value["end_ns"] + 1, value["start_ns"]
    elif op == "empty" and isinstance(value, (list, dict)):
        value.clear()
    elif op == "copy" and isinstance(holder, list):
        holder.append(copy.deepcopy(value))
    elif op in ("replace", "delete", "negate", "reverse_span", "empty", "copy"):
        holder[key] = draw(VALUES)


@st.composite
def cases(draw) -> str:
    raw = copy.deepcopy(BASES[draw(st.sampled_from(sorted(BASES)))])
    for _ in range(draw(st.integers(1, 3))):
        _mutate(draw, raw)
    text = json.dumps(raw, separators=(",", ":"))
    damage = draw(st.sampled_from(["none"] * 12 + ["truncate", "nest", "bigint", "bytes"]))
    if damage == "truncate":
        text = text[:draw(st.integers(0, len(text)))]
    elif damage == "nest":
        n = draw(st.sampled_from([50, 100, 5000, 100_000]))
        text = text.replace('"meta":{', '"meta":{"x":' + "[" * n + "]" * n + ",", 1)
    elif damage == "bigint":
        text = text.replace('"version":1', '"version":1' + "0" * draw(st.integers(1, 5000)), 1) \
            if draw(st.booleans()) else text.replace("0", "9" * draw(st.integers(20, 5000)), 1)
    elif damage == "bytes":
        return text.encode()[:draw(st.integers(0, 200))] + draw(st.binary(max_size=20))
    return text


# --------------------------------------------------------------------------- consumers

def consume_summary(trace):
    from ddpsim.analysis import summarize

    return summarize(trace)


def _strict_int(s: str) -> int:
    v = int(s)
    assert -2**63 <= v < 2**63, f"an export holds {s[:30]}, outside int64"
    return v


def _no_constant(c: str):
    raise AssertionError(f"an export holds {c}, which is not JSON")


def consume_chrome(trace):
    """``export --chrome``: its JSON is strict (no NaN, every integer inside int64)."""
    from ddpsim.trace.export import to_chrome

    text = json.dumps(to_chrome(trace))
    json.loads(text, parse_int=_strict_int, parse_constant=_no_constant)
    return text


def _loads_back(result):
    """What ``simulate --out`` (or the page's download) would write is a trace ddpsim reads back."""
    out, _ = result
    try:
        parse_trace(json.dumps(out.to_dict(), separators=(",", ":")), name="the output")
    except TraceFormatError as e:
        raise AssertionError(f"a simulation wrote a trace that does not load back: {e}") from None
    return result


def consume_simulate(trace):
    from ddpsim.sim.api import SimConfig, simulate
    from ddpsim.learn.extract import config_from_trace, workload_from_trace

    w = workload_from_trace(trace)
    cfg = SimConfig(**{**config_from_trace(trace), "iters": 2, "max_events": 200_000, "time_limit_s": 5.0})
    return _loads_back(simulate(w, cfg))


def consume_whatif(trace):
    """What the What-if page does with the open trace (ddpsim.app.whatif, without Streamlit)."""
    from ddpsim.app import whatif

    try:
        base = whatif.base_for(trace)  # the page stops on its ValueError in one line too
        cfg = whatif.sim_config(base)
        cfg.max_events, cfg.time_limit_s = 200_000, 5.0  # the page's own limit is HANG_S: stop well before
        return _loads_back(whatif.run(whatif.workload(base, trace), cfg))
    except ValueError as e:  # the page shows these as one st.error line (e.g. an unknown GPU in the spec)
        if isinstance(e, PLAIN) or "\n" in str(e):
            raise
        raise PageError(str(e)) from None


def consume_figures(trace):
    """What the Timeline and Buckets pages draw from a trace."""
    import matplotlib.pyplot as plt

    from ddpsim import viz

    iterations = sorted({it.iteration for r in trace.ranks for it in r.iterations})
    if not iterations:
        raise PartialTraceError("no iteration to draw")  # what require_trace tells the pages
    try:
        viz.plot_timeline(trace, iterations[-1])
        viz.plot_buckets(trace, trace.ranks[0].rank)
    finally:
        plt.close("all")


CONSUMERS = {"summary": consume_summary, "export --chrome": consume_chrome, "simulate": consume_simulate,
             "what-if page": consume_whatif}
PLAIN = (PartialTraceError,)  # a valid trace that holds too little: a one-line note


class PageError(Exception):
    """A one-line ValueError the What-if page catches and shows with st.error (not a crash)."""


def _alarm(signum, frame):
    raise Hang()


def check(text, stats: Counter, consumers=CONSUMERS) -> None:
    """Run one case through the loader and every consumer; count outcomes; fail on anything else."""
    from ddpsim.sim.api import SimulationTooLarge

    stats["cases"] += 1
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    try:
        try:
            trace = parse_trace(text, name="case")
        except TraceFormatError as e:
            assert "\n" not in str(e), "one line"
            stats["loader: TraceFormatError"] += 1
            return
        stats["loader: accepted"] += 1
        for name, consume in consumers.items():
            try:
                consume(trace)
                stats[f"{name}: ok"] += 1
            except PLAIN as e:
                stats[f"{name}: {type(e).__name__}"] += 1
            except SimulationTooLarge:
                stats[f"{name}: SimulationTooLarge"] += 1
            except PageError:
                stats[f"{name}: one-line error on the page"] += 1
    except Hang:
        stats["hangs"] += 1
        raise AssertionError(f"a case ran longer than {HANG_S} s") from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def fuzz(n: int, consumers=CONSUMERS, share: int | None = None) -> Counter:
    """``n`` cases, the same on every run unless DDPSIM_FUZZ_RANDOM=1. ``share``: which of several
    processes' shares this is (each its own seed, so the shares hold different cases)."""
    fixed = not os.environ.get("DDPSIM_FUZZ_RANDOM")
    stats = Counter({"hangs": 0, "other exceptions": 0})  # any of either fails the test at once

    @settings(max_examples=n, deadline=None, database=None, derandomize=fixed and share is None,
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def run(text):
        check(text, stats, consumers)

    if fixed and share is not None:
        run = seed(share)(run)
    run()
    return stats


def _report(stats: Counter, label: str) -> None:
    print(f"\nfuzz {label}: " + json.dumps(dict(sorted(stats.items())), indent=1))
    path = os.environ.get("DDPSIM_FUZZ_REPORT")
    if path:  # one JSON line per test
        with open(path, "a") as f:
            f.write(json.dumps({"label": label, **dict(sorted(stats.items()))}) + "\n")


def test_fuzz_loader_and_consumers_quick():
    stats = fuzz(300)
    _report(stats, "300 cases")
    assert stats["loader: accepted"] > 10 and stats["loader: TraceFormatError"] > 10, stats


@pytest.mark.slow
def test_fuzz_loader_and_consumers_many():
    """MANY cases, shared over WORKERS processes (fresh interpreters: the cases need no state)."""
    n = [MANY // WORKERS + (share < MANY % WORKERS) for share in range(WORKERS)]
    with multiprocessing.get_context("spawn").Pool(WORKERS) as pool:  # leaving it kills both, on any error
        shares = pool.starmap(fuzz, [(k, CONSUMERS, share) for share, k in enumerate(n)])
    stats = Counter()
    for tally in shares:
        stats.update(tally)
    _report(stats, f"{MANY:,} cases")
    assert stats["cases"] >= MANY and stats["hangs"] == 0


@pytest.mark.slow
def test_fuzz_figures():
    """The dashboard's figures, on fewer cases (drawing is slower than analysing)."""
    stats = fuzz(300, {"figures": consume_figures})
    _report(stats, "300 cases, figures")
    assert stats["loader: accepted"] > 10


@pytest.mark.parametrize("text, expected", [
    ("[" * 5000 + "]" * 5000, "nests JSON 5000 levels deep"),
    ('{"format":"ddpsim-trace","version":' + "1" * 4300 + "}", "4300-digit integer"),
    ('{"format":"ddpsim-trace","version":true}', "version True"),
    ('{"format":"ddpsim-trace","version":1,"meta":{"x":9223372036854775808}}', "9223372036854775808, outside int64"),
])
def test_hostile_text_is_one_trace_format_error(text, expected):
    with pytest.raises(TraceFormatError, match=expected):
        parse_trace(text)


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r["ranks"][0].__setitem__("complete", "false"), "ranks[0].complete"),
    (lambda r: r["params"][0].__setitem__("bytes", -4), "params[0].bytes"),
    (lambda r: r["ranks"][0]["iterations"][0]["forward"].__setitem__("end_ns", -1), "forward.end_ns"),
    (lambda r: r["ranks"][0]["iterations"][0]["forward"].__setitem__("start_ns", 10**12), "iterations[0].forward"),
    (lambda r: r["ranks"][1].__setitem__("rank", 0), "ranks[1].rank"),
    (lambda r: r["ranks"][0]["iterations"][0]["grad_ready"][0].__setitem__("param", 77), "grad_ready"),
    (lambda r: r["ranks"][0]["iterations"][1].__setitem__("iteration", 0), "iterations[1].iteration"),
    (lambda r: r["meta"].__setitem__("world_size", 1), "ranks[1].rank"),
    (lambda r: r["meta"].__setitem__("options", {"bucket_cap_mb": 1e30}), "meta.options.bucket_cap_mb"),  # > int64 bytes
    (lambda r: r["meta"].__setitem__("options", {"bucket_cap_mb_list": [1, -1]}), "meta.options.bucket_cap_mb_list"),
    (lambda r: r["meta"].__setitem__("config", {"bucket_cap_mb_list": "1 5"}), "meta.config.bucket_cap_mb_list"),
    # options torch's DDP refuses (found by the 10,000 cases: the simulator raised a ValueError on them)
    (lambda r: r["meta"].__setitem__("options", {"static_graph": True, "no_sync_every": 3}), "meta.options: static_graph"),
    (lambda r: r["meta"].__setitem__("options", {"bucket_cap_mb": -2, "find_unused_parameters": True}),
     "meta.options: a negative bucket cap"),
])
def test_invalid_values_name_the_field(mutate, field):
    raw = copy.deepcopy(BASES["fixture"])
    mutate(raw)
    with pytest.raises(TraceFormatError) as err:
        parse_trace(json.dumps(raw))
    assert field in str(err.value) and "\n" not in str(err.value)


def test_partial_traces_load_and_say_what_they_hold():
    from ddpsim.analysis import summarize

    for name in ("partial", "half"):
        trace = parse_trace(json.dumps(BASES[name]))
        assert not trace.complete
    with pytest.raises(PartialTraceError, match="nothing to summarise: rank 0 \\(incomplete\\): 0 iteration"):
        summarize(parse_trace(json.dumps(BASES["partial"])))
    assert summarize(parse_trace(json.dumps(BASES["half"])))["iteration_time_s"] > 0


def test_a_huge_iteration_number_is_not_a_huge_simulation():
    """Found by DDPSIM_FUZZ_RANDOM=1: iteration 4 renumbered 1,000,004 made the replay's per-step
    lists a million long (21 s on the What-if page); they follow the recorded steps now."""
    raw = copy.deepcopy(BASES["branchy"])
    raw["ranks"][0]["iterations"][4]["iteration"] = 1_000_004
    stats = Counter()
    check(json.dumps(raw), stats)  # within HANG_S, and every output loads back
    assert stats["simulate: ok"] == stats["what-if page: ok"] == 1
