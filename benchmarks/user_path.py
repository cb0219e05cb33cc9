"""The user's path, measured on fresh recordings: a run replayed, and another world size asked for.

    .venv/bin/python benchmarks/user_path.py --out docs/data     # about 6 minutes on 2 quiet cores

1. **Replay** (``replay.json``): record mlp, transformer, shuffled and convnet at 2 ranks with
   bucket caps 0.25 MiB and torch's default (20 iterations), then ``ddpsim validate --trace RUN``
   on each: the simulator replaying the run it learnt from, as the What-if page's unchanged run.
2. **Another world size** (``worldsize.json``): record mlp, transformer and shuffled at 2 and at 4
   ranks (``--rounds`` times each), then ``ddpsim simulate --trace RUN2 --world-size 4`` exactly as
   a user types it (it measures the allreduce at 2 and 4 ranks on this machine, Note [Another world
   size on the user's path]) against the 4-rank recording.

Both files hold ``{"rows": [{"predicted_ms", "measured_ms", "error_pct", ...}]}`` as ``validate
--out`` writes them, so ``docs/accuracy_figure.py`` draws them. Run it on a quiet machine: the
recordings are timed (with other work running, 4 ranks on 2 cores vary from launch to launch far
beyond what any prediction from 2 ranks can follow; docs/accuracy.md).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ddpsim.analysis import summarize  # noqa: E402
from ddpsim.cli import main as cli  # noqa: E402
from ddpsim.trace import load_trace  # noqa: E402

REPLAY = [(m, cap) for m in ("mlp", "transformer", "shuffled", "convnet") for cap in ("0.25", "default")]
WORLD = ("mlp", "transformer", "shuffled")


def run(*argv: str) -> tuple[str, str]:
    """One ddpsim command in this process: (stdout, stderr); a failure stops the benchmark."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli(list(argv))
    if rc != 0:
        raise SystemExit(f"ddpsim {' '.join(argv)} failed: {err.getvalue().strip()}")
    return out.getvalue(), err.getvalue()


def record(folder: Path, model: str, ws: int, iters: int, cap: str = "default", tag: str = "") -> Path:
    path = folder / f"{model}_ws{ws}_cap{cap}{tag}.json"
    run("record", "--model", model, "--world-size", str(ws), "--iters", str(iters), "--out", str(path),
        *([] if cap == "default" else ["--bucket-cap-mb", cap]))
    return path


def row(model: str, predicted_s: float, measured_s: float, **more) -> dict:
    out = {"model": model, "predicted_ms": predicted_s * 1e3, "measured_ms": measured_s * 1e3,
           "error_pct": (predicted_s / measured_s - 1) * 100, **more}
    print(f"  {model:12} predicted {out['predicted_ms']:7.1f} ms  measured {out['measured_ms']:7.1f} ms  "
          f"error {out['error_pct']:+5.1f}%", flush=True)
    return out


def replays(folder: Path, iters: int) -> list[dict]:
    rows = []
    for model, cap in REPLAY:
        path = record(folder, model, 2, iters, cap)
        res = json.loads(run("validate", "--trace", str(path))[0].strip().splitlines()[-1])["iteration_time_s"]
        rows.append(row(model, res["predicted"], res["measured"], world_size=2, bucket_cap_mb=cap))
    return rows


def world_sizes(folder: Path, iters: int, rounds: int) -> list[dict]:
    rows = []
    for r in range(1, rounds + 1):
        for model in WORLD:
            two, four = (record(folder, model, ws, iters, tag=f"_r{r}") for ws in (2, 4))
            out, err = run("simulate", "--trace", str(two), "--world-size", "4")
            predicted = json.loads(out.strip().splitlines()[-1])
            rows.append(row(model, predicted["iteration_time_s"], summarize(load_trace(four))["iteration_time_s"],
                            world_size=4, from_world_size=2, round=r, link=predicted["link"]["name"],
                            calibration=[line for line in err.splitlines() if "measur" in line]))
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="runs/user_path",
                   help="folder for replay.json and worldsize.json (default runs/user_path; docs/data: the README's rows)")
    p.add_argument("--iters", type=int, default=20, help="iterations per recording (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="recordings of each model at 2 and 4 ranks (default 3)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"load average {os.getloadavg()[0]:.2f} (run this on a quiet machine)", flush=True)
    with tempfile.TemporaryDirectory(prefix="ddpsim-user-path-") as tmp:
        print("replay (validate --trace RUN):", flush=True)
        (out / "replay.json").write_text(json.dumps({"rows": replays(Path(tmp), args.iters)}, indent=1))
        print("another world size (simulate --trace RUN2 --world-size 4):", flush=True)
        (out / "worldsize.json").write_text(json.dumps({"rows": world_sizes(Path(tmp), args.iters, args.rounds)},
                                                       indent=1))
    print(f"wrote {out / 'replay.json'}, {out / 'worldsize.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
