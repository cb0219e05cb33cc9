"""The bucket-layout sweep the What-if page and ``ddpsim sweep`` both run, and the row they recommend.

Bucket cap x ordering x find_unused_parameters, and torch's ordering with find_unused_parameters
off once more with the small bucket last (``SimConfig.last_bucket_small``: torch's
DDP_SET_LAST_BUCKET_CAP=1, the only rows it changes: elsewhere torch never rebuilds its buckets,
Note [The small bucket last]). The best row is the lowest metric; among rows as good, the one with
less to set: torch's own ordering, then find_unused_parameters off (it searches the autograd graph
every iteration), then no environment variable. Where every row is as good, there is no best.

    rows, notes = sweep_rows(work, cfg)          # a Workload and a whole SimConfig
    rows, notes = sweep_rows(work, {}, trace=run)  # a recorded run replayed with each row's changes
    print(describe_best(recommend(rows)))
"""
from __future__ import annotations

import time

from ddpsim.buckets import DEFAULT_CAP_MB, MIB
from ddpsim.learn import planned, sweep
from ddpsim.sim import api as _api
from ddpsim.sim.sweep import combinations

SWEEP_ORDERS = ("torch", "definition", "random")
SWEEP_CAPS = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0)  # and None: torch's default
# caps and torch's default x (orders x find_unused, and torch's ordering with the small bucket last, find_unused off)
SWEEP_RUNS = (len(SWEEP_CAPS) + 1) * (len(SWEEP_ORDERS) * 2 + 1)
SMALL_LAST_ENV = "DDP_SET_LAST_BUCKET_CAP=1"  # torch reads it when DDP rebuilds its buckets
METRICS = {"iteration_time_s": 1, "exposed_comm_s": 1, "overlap_fraction": -1}  # -1: higher is better
TIE = {"iteration_time_s": 5e-5, "exposed_comm_s": 5e-5, "overlap_fraction": 5e-4}  # rows this close (s; a
# fraction) have no winner: 0.05 ms, 0.05 points
NOT_DDP_ORDERS = ("definition", "random")  # layouts torch never builds (its own: "torch"; "reverse" is
# its construction layout, which find_unused_parameters=True keeps; "ready", the ideal arrival order)
NOT_DDP = ("is not a DDP option: torch fills its buckets in reverse order of model.parameters(), then rebuilds "
           "them in gradient-ready order unless find_unused_parameters=True; the row shows what a layout is worth")


def sweep_rows(work, base, trace=None, caps=SWEEP_CAPS, orders=SWEEP_ORDERS, find_unused=(False, True),
               small_last=True, grid: dict | None = None, metric: str = "iteration_time_s",
               needs_fu: str | None = None, progress=None) -> tuple[list[dict], list[str]]:
    """The metrics per bucket cap (None, torch's default: 25 MiB, first bucket 1 MiB, then ``caps``) x
    ``orders`` x ``find_unused``, over ``grid``'s other SimConfig fields (world_size: [8, 64], say), ranked
    (``rank``, ``best``). ``small_last``: torch's ordering with find_unused off also with
    ``last_bucket_small``; every row says ``last_bucket_small``. ``base``: a SimConfig, or with ``trace``
    a dict of the recorded run's changes (``ddpsim.learn.sweep``). Returns (rows, notes); a combination
    the simulator refuses for unused parameters with find_unused off (torch fails on them) becomes a note;
    any other refusal (an option out of range, say), or every combination refused, is raised (a ValueError).
    ``needs_fu``: why the recorded model cannot run without find_unused_parameters (a parameter it marked
    unused, ``ddpsim.analysis.unused``): find_unused stays on, and the reason is a note. ``progress(done,
    total)``, if given, is called after each configuration."""
    refused: list = []
    done: dict = {}  # each planned run simulated once (Note [Configurations that build the same buckets])
    todo = grids(caps, orders, find_unused, small_last, grid, needs_fu)
    total, before, rows = sum(map(combinations, todo)), 0, []
    for g in todo:
        tell = None if progress is None else (lambda n, _, at=before: progress(at + n, total))  # over all grids
        rows += sweep(work, g, base, metric, refused, trace, done, tell)
        before += combinations(g)
    wrong = [msg for c, msg in refused if c["find_unused_parameters"] or not getattr(work, "unused", True)]
    if wrong or (refused and not rows):  # not unused parameters without find_unused: an option out of range, say
        raise ValueError((wrong or [refused[0][1]])[0])
    refused += [({"find_unused_parameters": False}, needs_fu)] if needs_fu else []
    notes = list(dict.fromkeys(f"find_unused_parameters={c['find_unused_parameters']}: {msg}" for c, msg in refused))
    return rank(rows, metric), notes


def grids(caps=SWEEP_CAPS, orders=SWEEP_ORDERS, find_unused=(False, True), small_last=True,
          grid: dict | None = None, needs_fu: str | None = None) -> list[dict]:
    """The grids ``sweep_rows`` sweeps (its arguments): every cap x order x find_unused, then torch's
    ordering with find_unused off and the small bucket last."""
    find_unused = (True,) if needs_fu else find_unused
    full = {**(grid or {}), "find_unused_parameters": list(find_unused), "bucket_cap_mb": [None, *caps],
            "order": list(orders)}
    out = [{**full, "last_bucket_small": [False]}]
    if small_last and "torch" in orders and False in find_unused:
        out.append({**full, "find_unused_parameters": [False], "order": ["torch"], "last_bucket_small": [True]})
    return out


def expected_seconds(work, base, needs_fu: str | None = None) -> float:
    """About how long ``sweep_rows(work, base, needs_fu=needs_fu)`` takes here (``base`` a SimConfig): its
    simulations (configurations that build the same buckets share one: ``planned``) times how long
    ``base`` itself takes to simulate, timed now. Every row differs from ``base`` in its buckets only."""
    start = time.perf_counter()
    _api.simulate(work, base)
    once = time.perf_counter() - start
    runs = set().union(*(planned(work, g, base) for g in grids(needs_fu=needs_fu)))
    return len(runs) * once


def _key(row: dict, metric: str):
    """Best first: the metric, then among rows as good the one with less to set: torch's own ordering
    (the others need a model defined in another order, or cannot be had), find_unused_parameters off,
    no environment variable."""
    return (METRICS[metric] * row[metric], row.get("order", "torch") != "torch",
            bool(row.get("find_unused_parameters")), bool(row.get("last_bucket_small")))


def rank(rows: list[dict], metric: str = "iteration_time_s") -> list[dict]:
    """``rows`` (in their order) with ``rank`` (1: best) and ``best`` set: by ``metric``, and among rows
    as good, one with less to set first (``_key``)."""
    for n, r in enumerate(sorted(rows, key=lambda r: _key(r, metric)), 1):
        r.update(rank=n, best=n == 1)
    return rows


def best_row(rows: list[dict], metric: str = "iteration_time_s") -> dict | None:
    """The row ``rank`` would make best (the lowest ``metric``; among rows as good, ``_key``'s)."""
    return min(rows, key=lambda r: _key(r, metric)) if rows else None


def recommend(rows: list[dict]) -> dict | None:
    """The row ranked best (its cap, order, find_unused_parameters and last_bucket_small to set)."""
    return next((r for r in rows if r.get("best")), None)


def no_winner(rows: list[dict], metric: str = "iteration_time_s") -> bool:
    """Whether the rows (two or more) are all within ``TIE`` of each other: nothing to recommend."""
    values = [r[metric] for r in rows]
    return len(values) > 1 and max(values) - min(values) < TIE[metric]


def torch_best(rows: list[dict], metric: str = "iteration_time_s") -> dict | None:
    """The best row with torch's own ordering (what a user can set), or None."""
    return best_row([r for r in rows if r.get("order", "torch") == "torch"], metric)


def cap_text(cap: float | None) -> str:
    """A bucket cap as a user sets it: MiB, or torch's default."""
    return "default (torch's 25 MiB, first bucket 1 MiB)" if cap is None else f"{cap:g}"


def settings(row: dict) -> str:
    """What to set for ``row``, in plain text; the small bucket last as its environment variable."""
    what = []
    if "bucket_cap_mb" in row:
        what.append(f"bucket_cap_mb={cap_text(row['bucket_cap_mb'])}")
    what += [f"{k}={row[k]}" for k in ("first_bucket_cap_mb", "order", "find_unused_parameters") if k in row]
    if row.get("last_bucket_small"):
        what.append(f"{SMALL_LAST_ENV} in the ranks' environment (torch's small bucket last)")
    return ", ".join(what) or "the configuration given"


def describe_best(row: dict, rows: list[dict] | None = None, metric: str = "iteration_time_s") -> str:
    """The best row in one line of plain text; with ``rows``: no best where they all tie, and torch's
    ordering's best beside a best ordering torch does not offer."""
    def figures(r):
        return f"{r['iteration_time_s'] * 1e3:.1f} ms/iteration, {r['exposed_comm_s'] * 1e3:.1f} ms exposed communication"
    if rows and no_winner(rows, metric):
        return (f"no best (SIMULATED): all {len(rows)} configurations simulate alike, {figures(row)} (the row "
                "marked best below is one of them)")
    said = f"best (SIMULATED): {settings(row)}: {figures(row)}"
    if row.get("order") in NOT_DDP_ORDERS:
        said += f"; order={row['order']} {NOT_DDP}"
        if rows and (own := torch_best(rows, metric)) is not None:
            said += f"; with torch's ordering: {settings(own)}: {figures(own)}"
    return said


def powersgd_on_gloo(best: dict, rows: list[dict], backend: str | None, hook: str | None,
                     find_unused: bool = False, figures: str = "the sweep and its figure are") -> str:
    """A caution where the best row is one torch's PowerSGD aborts on over gloo: several buckets, or
    find_unused_parameters (Note [PowerSGD on gloo with several buckets] in ddpsim/minddp/comm_hook.py). The
    simulator plays a PowerSGD whose collectives go in order on every rank, as NCCL's do. ``find_unused``:
    the run's setting, for rows of a grid that does not vary it. The What-if page cautions its one
    simulated run with it too (``best``: that run's n_buckets and find_unused_parameters, ``rows`` empty,
    ``figures``: what the caution says NCCL would run; ``ddpsim.app.hook_cautions``)."""
    def fu(row):
        return bool(row.get("find_unused_parameters", find_unused))
    several = best.get("n_buckets", 0) > 1
    if backend != "gloo" or hook != "powersgd" or not (several or fu(best)):
        return ""
    why = " and ".join([f"{best['n_buckets']} buckets"] * several + ["find_unused_parameters"] * fu(best))
    return (f"Caution: on gloo, this run's backend, torch's powerSGD_hook aborts (or hangs) with {why}: it issues P's and Q's "
            "allreduces from gloo's callback thread, in an order that differs between ranks (Note [PowerSGD on gloo "
            f"with several buckets], ddpsim/minddp/comm_hook.py); {figures} what NCCL would run, "
            "and on gloo only one bucket without find_unused_parameters trains" + (
                ", which this model cannot do (it left a parameter unused)" * bool(rows and all(fu(r) for r in rows)))
            + ".")


BEYOND_FIT = 4  # a bucket this many times the largest allreduce a trace's own line was fitted through: cautioned


def beyond_fitted_sizes(cap: float | None, work, trace) -> str | None:
    """A caution where a bucket cap (None: torch's default 25 MiB) builds buckets far larger than any
    allreduce the recording timed, and the allreduce's cost is the line fitted through the recording's
    own collectives (``comm_fit`` from the trace, not a calibration): that line's slope is all that prices
    them. A shuffled model recorded at cap 0.25 (allreduces of 0.75-2.28 MiB) fitted 31.9 GB/s where its
    recordings at the default cap and at 50 MiB fitted 1.3 and 1.2 GB/s; the sweep named cap 50 best at
    49.7 ms against 81.4, and two recordings at cap 50 took 90.3 and 152.7 ms (84.9 at 0.25)."""
    fit = (getattr(work, "meta", None) or {}).get("comm_fit") or {}
    steady = set((getattr(work, "meta", None) or {}).get("steady_iterations") or [])
    if trace is None or not str(fit.get("from", "")).startswith("trace"):
        return None
    timed = [[b.bytes for b in it.buckets] for it in trace.longest_rank.iterations if it.iteration in steady and it.buckets]
    if not timed:
        return None
    hi, lo, total = max(map(max, timed)), min(map(min, timed)), max(map(sum, timed))
    largest = min(total, (DEFAULT_CAP_MB if cap is None else cap) * MIB)
    if largest <= BEYOND_FIT * hi:
        return None
    return (f"Caution: the recording timed allreduces of {lo / MIB:.2f}–{hi / MIB:.2f} MiB only; bucket_cap_mb="
            f"{cap_text(cap)} makes buckets of up to {largest / MIB:.1f} MiB, priced by the line fitted through those "
            "sizes, not measured: record a run at that cap to check it (`python -m ddpsim validate --trace THIS.json "
            "--against THAT.json` compares this prediction with it).")
