"""DDP's buffer broadcast, recorded and predicted: ``python -m ddpsim.experiments.buffers``.

For each world size, the zoo's ``convnet`` (BatchNorm: 2,760 bytes of buffers) is recorded with
``broadcast_buffers`` on and off, the two runs interleaved iteration by iteration in the same
ranks (``record_many``), ``--repeats`` times. Each run is then predicted by the simulator
(``experiments.validate.validate``, the same path as ``simulate --trace``):
- ``replay``: learnt from the run itself, its own options;
- ``what-if``: learnt from the run with the other setting, at the same world size (the on run
  predicts the off run and the other way round): the broadcast is added or removed by the model.
It prints one row per prediction (measured and predicted iteration time, the error, the
median recorded broadcast span) and the median and largest absolute error, and with
``--out X`` writes X.json. Results: ``docs/buffers.md``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from ddpsim.experiments.table import add_run_arguments, error_summary, finish, recordings_folder

MODEL = "convnet"  # the zoo's model with BatchNorm buffers


def record_pair(ws: int, iters: int, folder: Path, repeat: int) -> dict[bool, Path]:
    """Record ``MODEL`` with broadcast_buffers on and off, interleaved; paths by setting."""
    from ddpsim.record.config import RecordConfig
    from ddpsim.record.launcher import record_many

    paths = {b: folder / f"{MODEL}_ws{ws}_bcast{int(b)}_r{repeat}.json" for b in (True, False)}
    cfgs = [RecordConfig(model=MODEL, world_size=ws, iters=iters, broadcast_buffers=b, profile_internals=False)
            for b in paths]
    record_many(cfgs, list(paths.values()))
    return paths


def broadcast_ms(trace) -> float | None:
    """The median recorded buffer-broadcast span (ms), None where there is none."""
    spans = [it.buffer_broadcast.complete_ns - it.buffer_broadcast.launch_ns
             for r in trace.ranks for it in r.iterations if it.buffer_broadcast]
    return statistics.median(spans) / 1e6 if spans else None


def predictions(paths: dict[bool, Path], ws: int, repeat: int) -> list[dict]:
    """The replay and the what-if prediction of each run of one recorded pair."""
    from ddpsim.experiments.validate import validate
    from ddpsim.trace import load_trace

    traces = {b: load_trace(p) for b, p in paths.items()}
    rows = []
    for target in (True, False):
        for kind, source in (("replay", target), ("what-if", not target)):
            m = validate(traces[source], traces[target])["metrics"]["iteration_time_s"]
            rows.append({"world_size": ws, "repeat": repeat, "broadcast_buffers": target, "prediction": kind,
                         "learnt_from": f"broadcast {'on' if source else 'off'}",
                         "measured_ms": m["measured"] * 1e3, "predicted_ms": m["predicted"] * 1e3,
                         "error": m["rel_error"], "recorded_broadcast_ms": broadcast_ms(traces[target])})
    return rows


def table(rows: list[dict]) -> str:
    head = ("| ranks | run | broadcast | prediction | learnt from | measured ms | predicted ms | error | "
            "broadcast span ms |\n|---|---|---|---|---|---|---|---|---|")
    lines = [f"| {r['world_size']} | {r['repeat']} | {'on' if r['broadcast_buffers'] else 'off'} | "
             f"{r['prediction']} | {r['learnt_from']} | {r['measured_ms']:.1f} | {r['predicted_ms']:.1f} | "
             f"{r['error'] * 100:+.1f}% | "
             f"{'-' if r['recorded_broadcast_ms'] is None else format(r['recorded_broadcast_ms'], '.2f')} |"
             for r in rows]
    return "\n".join([head, *lines, "", error_summary([r["error"] for r in rows])])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--world-sizes", default="2,4", help="comma-separated (default 2,4)")
    p.add_argument("--repeats", type=int, default=2, help="recorded pairs per world size (default 2)")
    p.add_argument("--iters", type=int, default=10, help="micro-steps per recording (default 10)")
    add_run_arguments(p)
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.world_sizes.split(",") if x]
    with recordings_folder(args.workdir, "ddpsim-buffers-") as folder:
        rows = []
        for ws in sizes:
            for repeat in range(1, args.repeats + 1):
                print(f"recording {MODEL} at {ws} ranks, pair {repeat} of {args.repeats}", file=sys.stderr, flush=True)
                rows += predictions(record_pair(ws, args.iters, folder, repeat), ws, repeat)
    return finish(table(rows), rows, args.out)


if __name__ == "__main__":
    sys.exit(main())
