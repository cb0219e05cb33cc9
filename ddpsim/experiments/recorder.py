"""The recordings of ``validate --grid`` and ``--extrapolate``: per (model, world size),
one calibration run and every grid run, recorded together (Note [Interleave the
measurements] in ``grid.py``); groups of several world sizes take turns (Note [Take
turns across world sizes] in ``ddpsim/record/turns.py``). With ``reuse`` the traces
already in the workdir are loaded instead.
"""
from __future__ import annotations

import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ddpsim.experiments.table import stats

CAL_SIZES = [k * 1024 for k in (4, 64, 256, 512, 1024, 2048, 4096, 8192)]  # bytes, for the allreduce line
CAL_REPS = 41  # `calibrate` repetitions per size: a small allreduce here takes ~0.5 or ~3.5 ms at random


class Recorder:
    """Records (or, with ``reuse``, loads) the interleaved runs of one (model, world size)."""

    def __init__(self, workdir, configs, record_iters, reuse, calibration_cap_mb, log=None):
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        if reuse and not (workdir and Path(workdir).is_dir()):  # not made here: an empty one has nothing to reuse
            raise ValueError(f"--reuse: --workdir {workdir} is not a folder (it names where the recorded traces are)")
        # Not a TemporaryDirectory: that removes itself at exit, and a run that fails or is
        # interrupted says its partial traces are kept in it (close)
        self.tmp = None if workdir else tempfile.mkdtemp(prefix="ddpsim-validate-")
        self.work = Path(workdir or self.tmp)
        self.work.mkdir(parents=True, exist_ok=True)
        self.configs, self.iters, self.reuse, self.cap = configs, record_iters, reuse, calibration_cap_mb
        self.loads, self.t0 = [], time.monotonic()

    def specs(self, model: str, ws: int) -> list[tuple]:
        """(name, RecordConfig, grid config or None) of the calibration run, then each grid run."""
        from ddpsim.record.config import RecordConfig

        out = [("calibration", RecordConfig(model=model, world_size=ws, iters=self.iters, bucket_cap_mb=self.cap,
                                            profile_internals=False, probe_allreduce_bytes=CAL_SIZES), None)]
        for c in self.configs:
            order, cap = c["order"], c["bucket_cap_mb"]
            impl = "torch" if order == "torch" else "minddp"
            name = f"{model}_ws{ws}_cap{cap or 'default'}_{order}_fu{int(c['find_unused'])}"
            # No profiler: it slows the profiled run ~10% and, interleaved, the next one too.
            out.append((name, RecordConfig(model=model, world_size=ws, iters=self.iters, impl=impl,
                                           bucket_cap_mb=cap, find_unused_parameters=c["find_unused"],
                                           order=None if impl == "torch" else order, profile_internals=False), c))
        return out

    def paths(self, model: str, ws: int, launch: int = 1) -> list[Path]:
        """Where each run of ``specs`` is kept; launches after the first (Note [Pool launches]
        in ``extrapolate.py``) end in ``_l2``, ``_l3``..."""
        tail = f"_l{launch}" if launch > 1 else ""
        return [self.work / f"{model}_ws{ws}_calibration_cap{self.cap:g}{tail}.json" if c is None
                else self.work / f"{name}{tail}.json" for name, _, c in self.specs(model, ws)]

    def group(self, model: str, ws: int) -> tuple[list, list]:
        """(specs, traces) of the group, recorded together (Note [Interleave the measurements])."""
        return self.groups(model, [ws])[ws]

    def groups(self, model: str, world_sizes: list[int], launch: int = 1) -> dict[int, tuple[list, list]]:
        """world size -> (specs, traces) of ``model``'s group at each size; several world sizes
        are recorded at the same time, taking turns (Note [Take turns across world sizes]).
        ``launch``: which launch of these groups this is (Note [Pool launches])."""
        from ddpsim.record.launcher import record_many
        from ddpsim.trace import load_trace

        specs = {ws: self.specs(model, ws) for ws in world_sizes}
        paths = {ws: self.paths(model, ws, launch) for ws in world_sizes}
        self.loads.append(float(Path("/proc/loadavg").read_text().split()[0]))
        self.log(f"    load {self.loads[-1]:.2f}, {time.monotonic() - self.t0:.0f} s")
        if self.reuse and all(p.exists() for ps in paths.values() for p in ps):
            return {ws: (specs[ws], [load_trace(p) for p in paths[ws]]) for ws in world_sizes}
        groups = [([cfg for _, cfg, _ in specs[ws]], paths[ws]) for ws in world_sizes]
        traces = record_in_turns(groups) if len(groups) > 1 else [record_many(*groups[0])]
        return {ws: (specs[ws], t) for ws, t in zip(world_sizes, traces)}

    def check_reuse(self, groups, every: bool = True) -> None:
        """Raise unless every (model, world size, launch) of ``groups`` is in the workdir; with
        ``every`` off, unless one is (``--grid`` records the others: an interrupted grid resumed)."""
        absent = [(model, ws, missing) for model, ws, launch in groups
                  if (missing := [p.name for p in self.paths(model, ws, launch) if not p.exists()])]
        if absent and every:
            model, ws, missing = absent[0]
            raise ValueError(f"--reuse: {self.work} has no recording of {model} at world size {ws} "
                             f"(missing {missing[0]})")
        if absent and len(absent) == len(groups):
            raise ValueError(f"--reuse: {self.work} holds none of the recordings to reuse (expected "
                             f"{absent[0][2][0]} and the other runs of each group); drop --reuse to record them")
        for model, ws, missing in absent:
            self.log(f"--reuse: {self.work} has no recording of {model} at world size {ws} (missing "
                     f"{missing[0]}): it is recorded")

    def close(self, ok: bool = True) -> None:
        """Remove the temporary work folder after a run that ended well (``ok``); after a failure or
        an interrupt it is kept, with what was recorded (the error names those partial traces)."""
        if self.tmp is None:
            return
        if ok or not any(self.work.iterdir()):
            shutil.rmtree(self.work, ignore_errors=True)
        else:
            self.log(f"kept the recordings so far in {self.work} (remove it when done)")

    def result(self, rows, calibrations, **extra) -> dict:
        loads = self.loads or [math.nan]
        return {"rows": rows, "stats": stats(rows), "calibrations": calibrations, **extra,
                "load": {"min": min(loads), "max": max(loads), "median": statistics.median(loads)},
                "wall_s": time.monotonic() - self.t0}


def record_in_turns(groups: list[tuple[list, list]]) -> list[list]:
    """Record each group ``(configs, outs)`` (one world size each, ``launcher.record_many``)
    at the same time, taking turns round by round; returns each group's traces.

    Every group runs to its end even if another fails (``end`` lets the rest go
    on); then the first failure is raised.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ddpsim.record.launcher import record_many
    from ddpsim.record.turns import Turns

    with tempfile.TemporaryDirectory(prefix="ddpsim-turns-") as folder:
        turns = Turns.create(folder, [cfgs[0].world_size for cfgs, _ in groups])
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            futures = [pool.submit(record_many, cfgs, outs, None, None, t)
                       for (cfgs, outs), t in zip(groups, turns)]
            return [f.result() for f in futures]
