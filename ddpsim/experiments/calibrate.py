"""``python -m ddpsim calibrate``: fit alpha/beta of the local gloo allreduce.

Spawns k real gloo processes for each ``--world-sizes`` k (default 2; torch.multiprocessing,
a FileStore in a temp dir, rank r pinned to CPU r % cpus as the recorder pins them),
times ``dist.all_reduce`` of float32 tensors over a range of sizes
(``ddpsim.record.probe.AllreduceProbe``: one of each size per round, ``--reps``
rounds after a warm-up; the mean), fits ``t = a + b·bytes`` and turns it into a ring
Link (``alpha = a / 2(k-1)``, ``B = 2(k-1)/k / b``). It also times each
allreduce's CPU time (``time.process_time``: all of the process's threads, gloo's
included; lower quartile) and fits the same line through it: the part of the
allreduce that is work on the core (Note [Not all of an allreduce is core work]
in network.py), and measures the scheduler's time slice
(``ddpsim.record.timeslice.time_slice``). The
result is printed, written to ``--save FILE`` (JSON), and
stored as ``meta["calibration"]`` in ``--trace`` (written to ``--out``), where
``ddpsim.learn.extract`` uses it when a trace's own buckets cannot be fitted.
``--world-sizes 2,4,8`` measures at each, in turn ``--rounds`` times (``combine``): every world size's lines,
and a fit that extrapolates to the others (``ddpsim.sim.netmodel``, Note [Ranks
that share cores slow the ring]); ``simulate``/``validate`` of another world size
than the trace's use the entry for the target world size.
The children are joined with a timeout and terminated if they hang.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

from ddpsim.record.timeslice import time_slice
from ddpsim.trace import save_trace

CAL_ROUNDS = 3  # rounds of every world size in turn (calibrate_world_sizes); torch has no such default

HELP = ("measure gloo allreduce time vs size on local processes (each --world-sizes) and fit the "
        "simulator's network model")


def add_arguments(p) -> None:
    p.add_argument("--sizes-kb", default="4,64,512,2048,8192",
                   help="message sizes in KiB, comma-separated: two or more, each above 0 and at most 1 GiB "
                        "(default 4,64,512,2048,8192)")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions per size (default 15)")
    p.add_argument("--rounds", type=int, default=CAL_ROUNDS, help="measure the world sizes in turn this many "
                   f"times; each size's median over them (default {CAL_ROUNDS}, Note [Calibrate world sizes in turns])")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before the workers are killed")
    p.add_argument("--world-sizes", default="2", help="ranks to measure at, comma-separated (default 2); "
                   "other world sizes use the fit through them (ddpsim.sim.netmodel)")
    p.add_argument("--trace", help="a trace to store the calibration in (meta.calibration)")
    p.add_argument("--out", help="where to write that trace (needs --trace; default: overwrite --trace)")
    p.add_argument("--save", metavar="FILE", help="also write the calibration to FILE (JSON; "
                   "validate/--extrapolate --calibration FILE)")


def _worker(rank: int, world: int, sizes: list[int], reps: int) -> list | None:
    """In each of ``world`` gloo ranks (``ddpsim.ranks.run_ranks``): ``reps`` rounds of one allreduce
    per size; rank 0 returns the probe's rows."""
    from ddpsim.record.probe import AllreduceProbe

    probe = AllreduceProbe(sizes)
    for _ in range(reps):
        probe.time_each()
    return probe.rows() if rank == 0 else None


def measure(sizes: list[int], reps: int = 15, world: int = 2,
            timeout: float = 120.0) -> list[tuple[int, float, float]]:
    """[(bytes, wall seconds, CPU seconds)] per size over ``reps`` (rank 0), on ``world`` ranks
    pinned as the recorder pins its ranks, so the costs are the ones a recording sees.

    Wall: the mean (a small allreduce takes either ~0.5 ms or ~3.5 ms here, waking
    up the peer; a median flips between the two). CPU: the lower quartile (Note
    [Spinning is not work]).
    """
    from ddpsim.ranks import RankFailure, run_ranks
    from ddpsim.record.process import pin_to_cpu

    try:
        rows = run_ranks(_worker, world, args=(sizes, reps), timeout=timeout, setup=pin_to_cpu)[0]
    except RankFailure as e:  # one line, as the commands print a ValueError
        why = f"did not finish in {timeout:.0f} s" if e.rank < 0 else f"failed: {e}"
        raise ValueError(f"the allreduce measurement at {world} ranks {why}") from None
    return [tuple(r) for r in rows]


def calibrate(sizes: list[int], reps: int = 15, timeout: float = 120.0, world: int = 2) -> dict:
    return fit_calibration(measure(sizes, reps, world, timeout), world)


def fit_calibration(rows: list[tuple[int, float, float]], world: int, turn: float | None = None) -> dict:
    """``meta["calibration"]`` from [(bytes, wall s, CPU s)]: the wall-time and CPU-time
    lines, the ring Link they give, and the scheduler's time slice (measured unless given)."""
    from ddpsim.learn.linkfit import fit_line
    from ddpsim.sim.network import Link

    a, b = fit_line([(n, t) for n, t, _ in rows])
    ca, cb = fit_line([(n, c) for n, _, c in rows])
    link = Link.from_fit(a, b, world, core_fit=(ca, cb), concurrency=2, name="gloo calibration")
    return {"backend": "gloo", "world_size": world, "alpha_s": link.alpha_s, "bandwidth_Bps": link.bandwidth_Bps,
            "intercept_s": a, "s_per_byte": b, "points": [[n, t] for n, t, _ in rows],
            "cpu_intercept_s": ca, "cpu_s_per_byte": cb, "cpu_points": [[n, c] for n, _, c in rows],
            "host_cpus": os.cpu_count(), "time_slice_s": time_slice() if turn is None else turn}


LINE_KEYS = ("world_size", "alpha_s", "bandwidth_Bps", "intercept_s", "s_per_byte", "points",
             "cpu_intercept_s", "cpu_s_per_byte", "cpu_points", "rounds")  # one world size's measurement


def combine(entries: dict[int, dict], turn: float | None = None) -> dict:
    """One calibration from ``fit_calibration`` s at several world sizes: each one's lines
    under ``world_sizes``, the world-size fits through them (``netmodel.fit_world_sizes``),
    and the smallest world size's keys at the top (what a single-world-size calibration held)."""
    from ddpsim.sim.netmodel import fit_world_sizes

    if not entries:
        raise ValueError("no world size to calibrate")
    first = entries[min(entries)]
    cpus = int(first.get("host_cpus") or os.cpu_count() or 0)
    lines = {k: {key: e[key] for key in LINE_KEYS if key in e} for k, e in sorted(entries.items())}
    fit = {"wall": fit_world_sizes({k: (e["intercept_s"], e["s_per_byte"]) for k, e in lines.items()}, cpus)}
    if all("cpu_intercept_s" in e for e in lines.values()):
        fit["cpu"] = fit_world_sizes({k: (e["cpu_intercept_s"], e["cpu_s_per_byte"]) for k, e in lines.items()},
                                     cpus)
    out = {**first, "world_sizes": {str(k): e for k, e in lines.items()}, "fit": fit}
    if turn is not None:
        out["time_slice_s"] = turn
    return out


def calibrate_world_sizes(sizes: list[int], reps: int, world_sizes: list[int], timeout: float = 120.0,
                          log=None, rounds: int = CAL_ROUNDS) -> dict:
    """``calibrate`` at each world size, in turn ``rounds`` times (the time slice measured once), ``combine`` d.

    Note [Calibrate world sizes in turns]: a prediction at another world size takes
    from here how the cost grows with the world size (Note [Anchor the network to the
    recording]), which one slow spell during one world size's measurement changes.
    Measured once each (five recordings of 2026-11-24, three models) the 4-rank
    slope was 1.26x to 2.70x the 2-rank one, and the two outliers gave the two worst
    predictions (shuffled at 4 ranks -13.8% and +10.1%). So the world sizes take
    turns (2, 4, 2, 4, ...) and each size's times are the medians over the rounds,
    which are kept in the entry (``rounds``).
    """
    if rounds < 1:
        raise ValueError(f"--rounds must be >= 1, not {rounds}")
    turn = time_slice()
    runs: dict[int, list] = {k: [] for k in world_sizes}
    for _ in range(rounds):
        for k in world_sizes:
            runs[k].append(measure(sizes, reps, k, timeout))
    entries = {}
    for k, rows in runs.items():
        entries[k] = {**fit_calibration(median_rows(rows), k, turn), "rounds": [[list(r) for r in x] for x in rows]}
        if log:
            log(f"calibrated k={k}: {entries[k]['intercept_s'] * 1e3:.3f} ms + "
                f"{entries[k]['s_per_byte'] * 2**20 * 1e3:.3f} ms/MiB (median of {rounds} rounds)")
    return combine(entries, turn)


def median_rows(rounds: list[list[tuple[int, float, float]]]) -> list[tuple[int, float, float]]:
    """[(bytes, wall s, CPU s)]: each size's median wall and CPU time over the rounds of ``measure``."""
    return [(n, statistics.median(r[i][1] for r in rounds), statistics.median(r[i][2] for r in rounds))
            for i, (n, _, _) in enumerate(rounds[0])]


def load_calibration(path: str) -> dict:
    """A calibration from ``calibrate --save FILE`` (JSON), or a trace's ``meta.calibration``."""
    try:
        text = Path(path).read_text()
        raw = json.loads(text) if text.strip() else None
    except (OSError, ValueError) as e:
        raise ValueError(f"--calibration {path}: cannot read it as JSON ({type(e).__name__})") from None
    if not text.strip():
        raise ValueError(f"--calibration {path} is empty")
    cal = raw.get("meta", {}).get("calibration") if isinstance(raw, dict) and "meta" in raw else raw
    if not isinstance(cal, dict) or not (cal.get("world_sizes") or "intercept_s" in cal):
        raise ValueError(f"--calibration {path} holds no calibration (write one with `ddpsim calibrate --save`)")
    return cal


MAX_SIZE_KB = 1 << 20  # KiB: the largest allreduce measured (1 GiB); not in torch


def parse_world_sizes(text: str, flag: str = "--world-sizes") -> list[int]:
    try:
        out = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"{flag} must be integers separated by commas, not {text!r}") from None
    if not out or out[0] < 2:
        raise ValueError(f"{flag} needs world sizes >= 2 (an allreduce needs two ranks), not {text!r}")
    return out


def check_launch(world_sizes: list[int], timeout_s: float, save: str | None) -> None:
    """``record``'s bounds on the ranks started and their timeout, and a --save that can be written, in one
    line before any rank starts (1,000 ranks were started on 2 cores; --timeout nan ran with none)."""
    from ddpsim.record.config import MAX_LOCAL_RANKS, MAX_TIMEOUT_S

    if world_sizes[-1] > MAX_LOCAL_RANKS:
        raise ValueError(f"--world-sizes {world_sizes[-1]} is more ranks than one machine runs here (at most "
                         f"{MAX_LOCAL_RANKS}, as record)")
    if not (math.isfinite(timeout_s) and 0 < timeout_s <= MAX_TIMEOUT_S):
        raise ValueError(f"--timeout must be more than 0 and at most {MAX_TIMEOUT_S:.0f} seconds, not {timeout_s}")
    if save and Path(save).is_dir():
        raise ValueError(f"--save {save} is a folder: name a file, e.g. {Path(save) / 'calibration.json'}")


def main(args) -> int:
    from ddpsim.trace import load_trace
    from ddpsim.trace.writer import refuse_empty, refuse_unwritable

    refuse_empty(args.out, "--out")  # an empty --out read as "not given" overwrote --trace
    refuse_empty(args.save, "--save")
    for flag, path in (("--out", args.out), ("--save", args.save)):  # before the measurement, not after it
        if path and not (flag == "--save" and Path(path).is_dir()):  # --save's folder: check_launch says more
            refuse_unwritable(path, flag)

    try:
        sizes = [int(float(s) * 1024) for s in args.sizes_kb.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--sizes-kb must be numbers separated by commas, not {args.sizes_kb!r}") from None
    if not sizes or min(sizes) <= 0 or max(sizes) > MAX_SIZE_KB * 1024:
        raise ValueError(f"--sizes-kb needs sizes above 0 and at most {MAX_SIZE_KB:,} KiB (1 GiB), not {args.sizes_kb}")
    if len(set(sizes)) < 2:  # the fit is a line: a latency and a bandwidth
        raise ValueError(f"--sizes-kb needs two sizes or more to fit a latency and a bandwidth, not {args.sizes_kb}")
    if args.out and not args.trace:
        raise ValueError("--out names where the --trace calibrated is written: give --trace FILE, or --save FILE "
                         "for the calibration alone")
    if args.reps < 1:
        raise ValueError("--reps must be >= 1")
    world_sizes = parse_world_sizes(args.world_sizes)
    check_launch(world_sizes, args.timeout, args.save)
    trace = load_trace(args.trace) if args.trace else None
    cal = calibrate_world_sizes(sizes, args.reps, world_sizes, args.timeout, rounds=args.rounds)
    for k, e in cal["world_sizes"].items():
        for (n, t), (_, c) in zip(e["points"], e["cpu_points"]):
            print(f"k={k:<3} {n / 1024:10.0f} KiB  {t * 1e3:9.3f} ms  (CPU {c * 1e3:.3f} ms)")
        print(f"k={k:<3} fit: alpha {e['alpha_s'] * 1e6:.1f} us per step, bandwidth {e['bandwidth_Bps'] / 1e9:.3f} "
              f"GB/s (ring); CPU time {e['cpu_intercept_s'] * 1e3:.3f} ms + "
              f"{e['cpu_s_per_byte'] * 2**20 * 1e3:.3f} ms/MiB")
    w = cal["fit"]["wall"]
    print(f"world-size fit (ddpsim.sim.netmodel): alpha {w['alpha_s'] * 1e6:.1f} us per ring step, "
          f"{w['beta_s_per_byte'] * 2**20 * 1e3:.3f} ms/MiB per ring byte, core sharing exponent {w['gamma']:.2f} "
          f"above {w['cpus']} cpus; scheduler time slice {cal['time_slice_s'] * 1e3:.2f} ms")
    if args.save:
        Path(args.save).write_text(json.dumps(cal, indent=1))
        print(f"saved to {args.save}")
    if trace is not None:
        trace.meta["calibration"] = cal
        out = args.trace if args.out is None else args.out  # given: used as given
        save_trace(trace, out)
        print(f"stored in meta.calibration of {out}")
    print(json.dumps(cal, separators=(",", ":")))
    return 0
