"""Uneven inputs under Join, recorded and predicted: ``python -m ddpsim.experiments.join``.

For each case (a zoo model, a world size, the unevenness K: rank r has K x r fewer batches) an
even run and a Join run (``record --uneven K --join``) are recorded one after the other,
``--repeats`` times. The simulator (``ddpsim.learn.learn``, as the What-if page does) predicts the
Join run with ``uneven=K, join=True`` (``ddpsim/sim/join.py``), learnt from either
- the even run (another recording: a what-if, with this machine's run-to-run drift in it), or
- the Join run's own first part, the micro-steps before any rank ran out of data: what follows
  (the joined phase and the end of Join) is predicted, not fitted.
Two figures per prediction, against the recording:
- ``run``: from the first forward to the end of Join (every rank out of data and the final model
  sync done), the time a user waits for;
- ``joined phase``: rank 0's median iteration once the rank with least data has joined.
Prints one row per prediction and the median and largest absolute error; ``--out X`` writes
X.json. Results: ``docs/join.md``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from ddpsim.experiments.table import add_run_arguments, error_summary, finish, recordings_folder

CASES = (("mlp", 2, 8), ("convnet", 2, 8), ("transformer", 2, 8), ("mlp", 3, 4))  # model, ranks, K
ITERS = 20  # micro-steps of rank 0


def run_ms(trace) -> float:
    """From the first forward to the end of Join on the last rank (ms)."""
    start = min(r.iterations[0].forward.start_ns for r in trace.ranks if r.iterations)
    return (max(r.join.end_ns for r in trace.ranks) - start) / 1e6


def joined_phase_ms(trace, first: int) -> float:
    """Rank 0's median iteration (end to end) from micro-step ``first`` on (ms)."""
    its = trace.ranks[0].iterations
    return statistics.median((its[i].end_ns - its[i - 1].end_ns) / 1e6 for i in range(max(first, 1), len(its)))


def first_part(trace, steps: int):
    """The recorded run up to micro-step ``steps`` (every rank still has data there), without Join."""
    import dataclasses

    options = {k: v for k, v in trace.meta["options"].items() if k not in ("join", "divide_by_initial_world_size")}
    meta = {**trace.meta, "options": {**options, "iters": steps, "uneven": 0}}
    ranks = [dataclasses.replace(r, iterations=r.iterations[:steps], join=None) for r in trace.ranks]
    return dataclasses.replace(trace, meta=meta, ranks=ranks)


def predict(case: tuple, folder: Path, repeat: int) -> list[dict]:
    """Record the even and the Join run of ``case``; predict the Join run from the even run, and
    from its own first part (the micro-steps before any rank ran out of data)."""
    from ddpsim.learn import learn, replay_config, simulate
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record
    from ddpsim.trace import load_trace

    model, ws, k = case
    paths = {kk: folder / f"{model}_ws{ws}_uneven{kk}_r{repeat}.json" for kk in (0, k)}
    for kk, path in paths.items():
        record(RecordConfig(model=model, world_size=ws, iters=ITERS, uneven=kk, join=True), path)
    joined, first = load_trace(paths[k]), ITERS - k * (ws - 1)
    rows = []
    for source, learnt in (("even run", load_trace(paths[0])), ("its first part", first_part(joined, first))):
        w = learn(learnt)
        sim, _ = simulate(w, replay_config(w, learnt, uneven=k, join=True, iters=ITERS))
        row = {"model": model, "world_size": ws, "uneven": k, "repeat": repeat, "learnt_from": source,
               "shadow_allreduces": sum(len(s.allreduces) for r in joined.ranks for s in r.join.shadows),
               "simulated_shadow_allreduces": sum(len(s.allreduces) for r in sim.ranks for s in r.join.shadows)}
        for key, f in (("run", run_ms), ("joined_phase", lambda t: joined_phase_ms(t, first))):
            row[f"{key}_measured_ms"], row[f"{key}_predicted_ms"] = f(joined), f(sim)
            row[f"{key}_error"] = row[f"{key}_predicted_ms"] / row[f"{key}_measured_ms"] - 1
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    head = ("| model | ranks | K | run | learnt from | shadow allreduces (recorded / simulated) | run ms measured | "
            "predicted | error | joined phase ms measured | predicted | error |\n|---|---|---|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {r['model']} | {r['world_size']} | {r['uneven']} | {r['repeat']} | {r['learnt_from']} | "
             f"{r['shadow_allreduces']} / "
             f"{r['simulated_shadow_allreduces']} | {r['run_measured_ms']:.1f} | {r['run_predicted_ms']:.1f} | "
             f"{r['run_error'] * 100:+.1f}% | {r['joined_phase_measured_ms']:.2f} | "
             f"{r['joined_phase_predicted_ms']:.2f} | {r['joined_phase_error'] * 100:+.1f}% |" for r in rows]
    out = [head, *lines, ""]
    for source in sorted({r["learnt_from"] for r in rows}):
        for key in ("run", "joined_phase"):
            errs = [r[f"{key}_error"] for r in rows if r["learnt_from"] == source]
            out.append(f"learnt from {source}, {key.replace('_', ' ')}: {error_summary(errs)}")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2, help="recorded pairs per case (default 2)")
    add_run_arguments(p)
    args = p.parse_args(argv)
    with recordings_folder(args.workdir, "ddpsim-join-") as folder:
        rows = []
        for n, case in enumerate(CASES, 1):
            for repeat in range(1, args.repeats + 1):
                print(f"[{n}/{len(CASES)}] {case[0]} at {case[1]} ranks, K={case[2]}, pair {repeat} of "
                      f"{args.repeats}", file=sys.stderr, flush=True)
                rows += predict(case, folder, repeat)
    return finish(table(rows), rows, args.out)


if __name__ == "__main__":
    sys.exit(main())
