"""The What-if page's simulation as one command line: ``python -m ddpsim simulate ...`` with the
page's choices, which prints the same iteration time (the page and the command line are one model);
its scaling curve as ``python -m ddpsim scaling ...``, which prints the curve's rows.

Only what differs from the command's own defaults is written: for a trace, its recorded options
(``replay_config``), or a SIMULATED trace's every option (``GpuModel.settings``); for a GPU model picked
by hand (``--arch``), torch's defaults. The trace is the file the sidebar's "Trace (ddpsim JSON)" button
downloads (``ui.trace_downloads``).
"""
from __future__ import annotations

import shlex

from ddpsim.app import whatif
from ddpsim.learn import hardware
from ddpsim.sim.network import networks


def simulate_command(base: whatif.Base, trace_file: str | None, cap, order: str, fu: bool, n_sync: int,
                     world: int, network: str, hook: str | None = None, bufs: bool | None = None,
                     algo: str | None = None, trace=None, small: bool | None = None,
                     sizes: list[int] | None = None) -> str:
    """The command for the page's choices; ``hook`` is what the simulator plays
    (``whatif_widgets.simulated_hook``); ``small``: torch's DDP_SET_LAST_BUCKET_CAP=1 (None: as recorded).
    With ``sizes`` (the scaling curve's world sizes), ``python -m ddpsim scaling`` at those sizes instead,
    which prints the curve's rows."""
    args = ["python", "-m", "ddpsim", "simulate" if sizes is None else "scaling"]
    if base.kind == "trace" or base.model is not None:
        args += ["--trace", trace_file or "TRACE.json"]
        now = whatif.choices(base)
        recorded_order = now["order"] if base.model is not None else base.config.get("order", "torch")
    else:
        steps = whatif.run_controls(base)
        args += ["--arch", base.arch, "--hardware", base.hardware, "--iters", str(steps["iters"])]
        args += ["--batch", str(base.batch)] if base.batch else []
        args += ["--seed", str(steps["seed"])] if steps["seed"] else []
        now = {"bucket_cap_mb": None, "find_unused_parameters": False, "no_sync_every": 1,
               "broadcast_buffers": None, "last_bucket_small": False, "algo": None}  # SimConfig's defaults, torch's
        recorded_order = "torch"
    args += ["--world-size", str(world)] if sizes is None else ["--world-sizes", ",".join(map(str, sizes))]
    if cap != now["bucket_cap_mb"]:
        args += ["--bucket-cap-mb", "default" if cap is None else f"{cap:g}"]
    if order != recorded_order:
        args += ["--order", order]
    if bool(fu) != now["find_unused_parameters"]:
        args += ["--find-unused-parameters" if fu else "--no-find-unused-parameters"]
    if int(n_sync) != now["no_sync_every"]:
        args += ["--no-sync-every", str(n_sync)]
    if bufs is not None and bufs != now["broadcast_buffers"]:
        args += ["--broadcast-buffers" if bufs else "--no-broadcast-buffers"]
    if small is not None and bool(small) != now["last_bucket_small"]:
        args += ["--last-bucket-small" if small else "--no-last-bucket-small"]
    if hook:
        args += ["--comm-hook", hook] + (["--powersgd-start-iter", str(whatif.POWERSGD_START)] if hook == "powersgd" else [])
    if algo != now["algo"]:  # None: NCCL's choice (a simulated trace's own NCCL_ALGO: written where it changed)
        args += ["--algo", algo or "auto"]
    if base.kind == "trace":
        args += _network_args(trace, network, sizes or [world])
    return shlex.join(args)


def _network_args(trace, network: str, sizes: list[int]) -> list[str]:
    """A recording's network, as ``whatif.sim_config`` sets it: NCCL between its GPU's nodes, a CPU
    recording's profile as one flat link; at another world size over the recorded network, what the
    page has (the trace's calibration, with any allreduce measured on the page, which the downloaded
    trace holds; else the ring model fitted at the recorded size): ``--no-calibrate``, so the command
    does not measure anew."""
    if network not in (whatif.AS_RECORDED, None, ""):
        if trace is not None and (spec := hardware.hardware_of(trace, network)):
            return ["--hardware", spec]
        prof = networks()[network]
        return ["--bandwidth-gbps", f"{float(prof['bandwidth_gbps']):g}", "--latency-us", f"{float(prof['latency_us']):g}",
                "--concurrency", str(int(prof.get("concurrency", 1))),
                "--interference", f"{float(prof.get('interference', 0)):g}"]
    return [] if trace is None or set(sizes) <= {trace.world_size} else ["--no-calibrate"]
