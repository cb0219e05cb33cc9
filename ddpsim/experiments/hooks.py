"""Comm hooks predicted from a plain run: ``python -m ddpsim.experiments.hooks``.

For each zoo model and bucket cap, one recording holds DDP with torch's ``allreduce_hook`` and
with each other hook, interleaved iteration by iteration in the same ranks (``record_many``), so a
slow spell of the machine hits every hook alike. The simulator learns from the allreduce run only
(``ddpsim.learn.learn``) and predicts each hook's run by what the hook sends
(``ddpsim/sim/comm_hooks.py``) and what its pieces cost in the allreduce run's own ranks
(``meta.hook_rates``, measured at the end of every recording: ``ddpsim/record/hookprobe.py``), and
the error is taken against the recorded run with that hook. The iteration time compared is each rank's own (its forward's start to its step's end,
median over ranks and steady iterations): a run without any collective (noop) never makes its
ranks wait for each other, so the span across ranks would measure how far they drift apart in the
gaps that the other hooks' interleaved steps leave, not the iteration.
The noise column is how far the error moves with the sampling of the iterations alone (``noise``):
the hook run's median over the allreduce run's, with their steady iterations resampled in pairs
(iteration i of both ran side by side), moves by the half-width of its 90% bootstrap interval, in
%. On the 2-core machine one iteration takes 0.8x to 1.7x another of the same run, and an error
within about this much is the machine's, not the model's (over several launches, their noises
combined as independent).
Each case is launched ``--launches`` times (every case once, then every case again), each launch
learnt from and predicted on its own, and a row's times are the means over the launches: a launch
of ranks draws a speed of its own (Note [Pool launches] in ``extrapolate.py``), and a hooked run
moves against its allreduce run from one launch to the next by more than its iterations' sampling
shows (shuffled at the default cap with bf16: 0.95x, 1.17x and 1.06x in three launches). The rows of
the launches alone are kept (``launch_errors``) and summarised under the table.
PowerSGD runs only where DDP has one bucket: torch's ``powerSGD_hook`` aborts gloo runs with
several (docs/comm-hooks.md), and after the rebuild every zoo model over 1 MiB has two (the first
bucket's 1 MiB cap), so PowerSGD is recorded on the convnet (0.3 MiB) alone. Prints one row per
prediction and the median and largest absolute error; ``--out X`` writes X.json.
"""
from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

from ddpsim.experiments.table import add_run_arguments, error_summary, finish, recordings_folder

MODELS = ("mlp", "transformer", "shuffled")
CAPS = (0.25, None)  # MiB; None: torch's default (25 MiB, a 1 MiB first bucket)
HOOKS = ("fp16", "bf16", "powersgd", "noop", "round-robin:2")  # predicted from "allreduce"
POWERSGD = {"powersgd_rank": 1, "powersgd_start_iter": 2}  # PowerSGD from the third synced step
ITERS = 48  # micro-steps per run (--iters)
LAUNCHES = 3  # launches of every case, pooled (--launches; Note [Pool launches] in extrapolate.py)
MIN_ITERS = 8  # fewer leave too few steady steps for a median and its noise
RESAMPLES = 1000  # bootstrap resamples of a run's steady iterations for its noise


CASES = tuple((m, c) for m in MODELS for c in CAPS) + (("convnet", None),)  # (model, cap)
ONE_BUCKET = ("convnet",)  # zoo models under 1 MiB: one bucket at the default cap, where PowerSGD runs on gloo


def hooks_for(model: str, cap) -> tuple[str, ...]:
    """The hooks recorded for ``model`` at ``cap``: PowerSGD only where DDP keeps one bucket."""
    return tuple(h for h in HOOKS if h != "powersgd" or (model in ONE_BUCKET and cap is None))


def record_case(model: str, cap, folder: Path, iters: int = ITERS) -> dict[str, Path]:
    """``model`` at ``cap`` with allreduce and every hook of ``hooks_for(cap)``, interleaved."""
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record_many

    names = ("allreduce", *hooks_for(model, cap))
    paths = {h: folder / f"{model}_cap{cap}_{h.replace(':', '')}.json" for h in names}
    cfgs = [RecordConfig(model=model, iters=iters, bucket_cap_mb=cap, comm_hook=h, profile_internals=False,
                         **(POWERSGD if h == "powersgd" else {})) for h in names]
    record_many(cfgs, list(paths.values()))
    return paths


def rank_iterations_s(trace) -> dict[int, list[float]]:
    """Each rank's own iteration (forward start to step end) in seconds, per steady iteration."""
    from ddpsim.analysis import steady_summary

    steady = set(steady_summary(trace)["steady_iterations"])
    times: dict[int, list[float]] = {}
    for r in trace.ranks:
        for it in r.iterations:
            if it.iteration in steady:
                times.setdefault(it.iteration, []).append((it.end_ns - it.forward.start_ns) * 1e-9)
    return times


def rank_iteration_s(times: dict[int, list[float]]) -> float:
    """Each rank's own iteration, median over ranks and steady iterations (``rank_iterations_s``)."""
    return statistics.median(t for ts in times.values() for t in ts)


def noise(a: dict[int, list[float]], b: dict[int, list[float]], seed: int = 0) -> float:
    """The half-width of a 90% bootstrap interval of ``rank_iteration_s(a) / rank_iteration_s(b)``
    (the hooked run's ``rank_iterations_s`` over the plain run's), over that ratio: each resample
    draws the iterations steady in both runs, whole (a slow spell slows every rank of one iteration
    alike) and in pairs (interleaved runs step side by side, so a slow spell slows both); nan
    without such iterations."""
    both = sorted(a.keys() & b.keys())
    if not both:
        return math.nan
    rng = random.Random(seed)

    def ratio(its) -> float:
        return statistics.median(t for i in its for t in a[i]) / statistics.median(t for i in its for t in b[i])
    low, *_, high = statistics.quantiles((ratio(rng.choices(both, k=len(both))) for _ in range(RESAMPLES)), n=20)
    return (high - low) / 2 / ratio(both)


def predict(paths: dict[str, Path], model: str, cap) -> list[dict]:
    """Each hook's recorded run against the prediction learnt from the allreduce run (its buckets
    and its ``meta.hook_rates``, which ``replay_config`` carries)."""
    from ddpsim.learn import learn, replay_config, simulate
    from ddpsim.trace import load_trace

    plain = load_trace(paths["allreduce"])
    w, plain_its = learn(plain), rank_iterations_s(plain)
    plain_s = rank_iteration_s(plain_its)
    rows = []
    for hook, path in paths.items():
        if hook == "allreduce":
            continue
        hooked = rank_iterations_s(load_trace(path))
        measured = rank_iteration_s(hooked)
        extra = POWERSGD if hook == "powersgd" else {}
        sim, _ = simulate(w, replay_config(w, plain, comm_hook=hook, **extra))
        predicted = rank_iteration_s(rank_iterations_s(sim))
        rows.append({"model": model, "cap": cap, "hook": hook, "plain_ms": plain_s * 1e3,
                     "measured_ms": measured * 1e3, "predicted_ms": predicted * 1e3, "error": predicted / measured - 1,
                     "noise": noise(hooked, plain_its)})
    return rows


def pool(per_launch: list[list[dict]]) -> list[dict]:
    """One row per prediction from its row in each launch: the launches' mean times, the error of
    the means, each launch's own error (``launch_errors``) and the launches' sampling noise
    combined (independent launches: the root of the summed squares over their number)."""
    pooled = []
    for same in zip(*per_launch, strict=True):
        row = dict(same[0])
        row.update({k: statistics.mean(r[k] for r in same) for k in ("plain_ms", "measured_ms", "predicted_ms")})
        row["error"] = row["predicted_ms"] / row["measured_ms"] - 1
        row["noise"] = math.sqrt(sum(r["noise"] ** 2 for r in same)) / len(same)
        row["launch_errors"] = [r["error"] for r in same]
        pooled.append(row)
    return pooled


def table(rows: list[dict]) -> str:
    """The rows as a markdown table and the error summary; with pooled rows (``pool``) a column of
    each launch's own error and a second summary over the launches alone."""
    launches = "launch_errors" in rows[0]
    columns = ["model", "cap MiB", "hook", "allreduce run ms", "hook run ms", "noise", "predicted ms", "error"]
    columns += ["each launch"] if launches else []
    head = "| " + " | ".join(columns) + " |\n|" + "---|" * len(columns)

    def cells(r) -> list[str]:
        each = [" / ".join(f"{e * 100:+.1f}" for e in r["launch_errors"])] if launches else []
        return [r["model"], str(r["cap"] or "default"), r["hook"], f"{r['plain_ms']:.1f}", f"{r['measured_ms']:.1f}",
                f"±{r['noise'] * 100:.1f}%", f"{r['predicted_ms']:.1f}", f"{r['error'] * 100:+.1f}%", *each]
    lines = ["| " + " | ".join(cells(r)) + " |" for r in rows]
    summary = [error_summary([r["error"] for r in rows])]
    if launches:
        summary.append("the launches alone: " + error_summary([e for r in rows for e in r["launch_errors"]]))
    return "\n".join([head, *lines, "", *summary])


def run_launch(launch: int, launches: int, folder: Path, iters: int) -> list[dict]:
    """Every case recorded and predicted once, in ``folder/launchN``."""
    here, rows = folder / f"launch{launch}", []
    here.mkdir(exist_ok=True)
    for n, (model, cap) in enumerate(CASES, 1):
        print(f"[launch {launch}/{launches}, {n}/{len(CASES)}] {model}, cap {cap or 'default'}", file=sys.stderr, flush=True)
        rows += predict(record_case(model, cap, here, iters), model, cap)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_arguments(p)
    p.add_argument("--iters", type=int, default=ITERS, help=f"micro-steps per recorded run (default {ITERS})")
    p.add_argument("--launches", type=int, default=LAUNCHES, help=f"launches of every case, pooled (default {LAUNCHES})")
    args = p.parse_args(argv)
    if args.iters < MIN_ITERS:
        p.error(f"--iters must be at least {MIN_ITERS} (PowerSGD starts at step 3; the noise needs steady steps)")
    if args.launches < 1:
        p.error(f"--launches must be at least 1, not {args.launches}")
    with recordings_folder(args.workdir, "ddpsim-hooks-") as folder:
        rows = pool([run_launch(launch, args.launches, folder, args.iters) for launch in range(1, args.launches + 1)])
    return finish(table(rows), rows, args.out)


if __name__ == "__main__":
    sys.exit(main())
