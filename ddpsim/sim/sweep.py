"""Grid sweeps over SimConfig fields: one row per configuration, the best marked.

    rows = sweep(workload, {"bucket_cap_mb": [1, 5, 25, 100], "world_size": [8, 64]},
                 base=SimConfig(iters=4))

Each row holds the grid values, iteration_time_s, exposed_comm_s, overlap_fraction,
n_buckets, the rank of the row by ``metric`` (1 = best) and ``best`` (True once).

Note [Configurations that build the same buckets]: a sweep over bucket caps and orderings names
many configurations that build the same buckets: every cap above the model's size is one bucket
(ResNet-18's 44.6 MiB at caps 50, 100 and 250 MiB). The bucket options reach the simulated times only
through the layouts and steps they plan (``plan_layouts``; the trace's meta names them too, and a row
takes none of it), so two configurations with the same plan and every other field the same simulate
alike, and the sweep simulates the first and gives its figures to the others (``same_run``;
tests/test_sim_sweep.py checks each row against its own simulation). On the What-if page's 77-row
sweep of the H100 ResNet-18 recording that is 62 simulations, of the MLP sample's 34.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
from dataclasses import asdict, fields

from ddpsim.sim.api import SimConfig, checked, plan_layouts, require_workload, simulate
from ddpsim.sim.replay import replay_caps

METRICS = ("iteration_time_s", "exposed_comm_s", "overlap_fraction")
MAX_CONFIGS = 10_000  # configurations in one sweep (each is also bounded by SimConfig.max_events)
LAYOUT_FIELDS = ("bucket_cap_mb", "bucket_cap_mb_list", "first_bucket_cap_mb", "order", "last_bucket_small")


def same_run(w, cfg: SimConfig) -> str:
    """What ``cfg`` simulates, as text: its planned buckets and steps, and every field but the ones that
    only choose them (Note [Configurations that build the same buckets]). Raises what ``simulate`` raises
    before it runs (``checked``: an option out of range, too many events) and what planning raises."""
    checked(w, cfg)
    layouts, _, plans = plan_layouts(w, cfg)
    rest = {**asdict(cfg), **dict.fromkeys(LAYOUT_FIELDS)}
    return json.dumps([layouts, [repr(p) for p in plans], rest], sort_keys=True, default=str)


def sweep(w, grid: dict, base: SimConfig | None = None, metric: str = "iteration_time_s",
          refused: list | None = None, make=None, done: dict | None = None, progress=None) -> list[dict]:
    """Simulate every combination of ``grid`` (field -> list of values) over ``base``.

    ``make(values) -> SimConfig``, if given, builds each combination's configuration
    instead (``ddpsim.learn.sweep`` replays a recorded run's options and ranks that way).

    ``bucket_cap_mb`` None is torch's default cap (25 MiB, first bucket 1 MiB). A combination
    with another cap than ``base``'s drops its ``bucket_cap_mb_list`` (``replay_caps``). With a
    ``refused`` list, a combination the simulator refuses (a ValueError, e.g. unused
    parameters without find_unused_parameters, which torch fails on) is appended to it
    as ``(values, message)`` instead of raising. ``done``: the runs simulated so far (``same_run`` ->
    summary), to share between sweeps of one workload (Note [Configurations that build the same buckets]).
    ``progress(done, total)``, if given, is called after each combination.
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}")
    rows, done = [], {} if done is None else done  # what each planned run simulated to
    each = configurations(w, grid, base, make)  # the grid checked
    total = combinations(grid)
    for n, (values, cfg, run) in enumerate(each, 1):
        refusal = run if isinstance(run, ValueError) else None  # refused before it ran
        if refusal is None:
            try:
                if run not in done:
                    done[run] = simulate(w, cfg)[1]
                rows.append({**values, **{m: done[run][m] for m in METRICS}, "n_buckets": done[run]["n_buckets"]})
            except ValueError as e:  # refused while it ran
                refusal = e
        if refusal is not None:
            if refused is None:
                raise refusal
            refused.append((values, str(refusal)))
        if progress is not None:
            progress(n, total)
    sign = -1 if metric == "overlap_fraction" else 1
    ranked = sorted(range(len(rows)), key=lambda i: sign * rows[i][metric])
    for r, i in enumerate(ranked, 1):
        rows[i]["rank"] = r
        rows[i]["best"] = r == 1
    return rows


def configurations(w, grid: dict, base: SimConfig | None = None, make=None):
    """Each combination of ``grid`` as ``sweep`` takes it: (values, its SimConfig, its planned run
    (``same_run``)), the run a ValueError where the simulator refuses it. Raises at once on a grid it
    cannot sweep."""
    require_workload(w)
    names = {f.name for f in fields(SimConfig)}
    bad = [k for k in grid if k not in names]
    if bad:
        raise ValueError(f"cannot sweep {', '.join(bad)}: not a SimConfig field")
    for k, v in grid.items():
        if not isinstance(v, (list, tuple)) or not v:
            raise ValueError(f"sweep values for {k} must be a non-empty list")
    if (n := combinations(grid)) > MAX_CONFIGS:
        raise ValueError(f"this sweep has {n:,} configurations; the limit is {MAX_CONFIGS:,}")
    base = base or SimConfig()
    return _each(w, grid, make or (lambda values: SimConfig(**{**replay_caps(asdict(base), values), **values})))


def combinations(grid: dict) -> int:
    """How many configurations ``grid`` (field -> non-empty list of values) names."""
    return math.prod(len(v) for v in grid.values())


def _each(w, grid: dict, make):
    for combo in itertools.product(*(grid[k] for k in grid)):
        values, cfg = dict(zip(grid, combo)), None
        try:
            cfg = make(values)
            yield values, cfg, same_run(w, cfg)
        except ValueError as e:
            yield values, cfg, e


def planned(w, grid: dict, base: SimConfig | None = None, make=None) -> set[str]:
    """The runs ``sweep`` simulates for ``grid`` (``same_run`` each), without simulating them."""
    return {run for _, _, run in configurations(w, grid, base, make) if isinstance(run, str)}


def to_csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    cols = list(rows[0]) if rows else []
    wr = csv.DictWriter(buf, fieldnames=cols)
    wr.writeheader()
    for r in rows:
        wr.writerow({k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()})
    return buf.getvalue()
