# ddpsim: instructor only (left out of the student release: it prints the simulator's sweep)
"""Record part 3's baseline.json, and check the simulator's sweep from it against real runs.

    .venv/bin/python assignments/part3/make_baseline.py [--out FILE] [--iters 40]

One group of real 2-rank runs of the zoo transformer, recorded together, interleaved iteration by
iteration in the same ranks (``record_many``, as ``validate --grid`` records; Note [Interleave the
measurements] in ddpsim/experiments/grid.py): the baseline at torch's default cap, whose ranks
time one allreduce of each size after every round (Note [Calibrate in the recording's ranks]:
its ``meta.calibration``, the latency and bandwidth ``ddpsim.learn`` uses), then one run at each
candidate cap. It writes the baseline and prints each candidate's measured time beside the time
the autograder's sweep predicts from the baseline alone. Record on a quiet machine (load average
below 1): with other jobs on the 2 cores, the measured order of the caps changes from group to
group (INSTRUCTORS.md, part 3).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def autograder():
    spec = importlib.util.spec_from_file_location("ddpsim_part3_autograder", HERE / "autograder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def record_group(folder: Path, iters: int, caps: list[float], model: str, world_size: int) -> list[Path]:
    """[the baseline, a run at each of ``caps``], recorded together into ``folder``."""
    from ddpsim.experiments.recorder import CAL_SIZES
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record_many

    def cfg(cap, probe=None):
        return RecordConfig(model=model, world_size=world_size, iters=iters, bucket_cap_mb=cap,
                            profile_internals=False, probe_allreduce_bytes=probe)

    paths = [folder / "baseline.json"] + [folder / f"cap{c:g}.json" for c in caps]
    record_many([cfg(None, CAL_SIZES)] + [cfg(c) for c in caps], paths)
    return paths


def main() -> None:
    from ddpsim.analysis import summarize
    from ddpsim.experiments.grid import attach_calibration
    from ddpsim.trace import load_trace, save_trace

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE / "baseline.json"), help="where the baseline goes")
    parser.add_argument("--iters", type=int, default=40, help="iterations of every run (default 40)")
    args = parser.parse_args()
    grader = autograder()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="ddpsim-part3-") as folder:
        paths = record_group(Path(folder), args.iters, grader.CANDIDATES_MB, grader.MODEL, grader.WORLD_SIZE)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        base = load_trace(paths[0])
        attach_calibration(base, grader.WORLD_SIZE, {})  # the line its own ranks measured
        base.meta["command"] = "python assignments/part3/make_baseline.py"  # how it was made (no folder)
        save_trace(base, args.out)
        measured = {c: summarize(load_trace(p))["iteration_time_s"] for c, p in zip(grader.CANDIDATES_MB, paths[1:])}
    line = base.meta["calibration"]
    print(f"wrote {args.out}: measured {summarize(base)['iteration_time_s'] * 1e3:.1f} ms at the default cap; "
          f"allreduce {line['intercept_s'] * 1e3:.2f} ms + {line['s_per_byte'] * 2**20 * 1e3:.3f} ms/MiB")
    for name, link in (("this machine", None), ("LINK", grader.LINK)):
        rows = grader.reference_rows(link, args.out)
        best = min(r["iteration_time_s"] for r in rows)
        print(f"\n{name}: cap (MiB), buckets, predicted, vs the fastest" + (", measured" if link is None else ""))
        for r in rows:
            t = r["iteration_time_s"]
            real = f"  {measured[r['bucket_cap_mb']] * 1e3:6.1f} ms" if link is None else ""
            print(f"{r['bucket_cap_mb']:6g} {r['n_buckets']:3d} {t * 1e3:7.1f} ms {t / best - 1:+6.1%}{real}")


if __name__ == "__main__":  # the calibration's time slice is measured in spawned processes
    main()
