"""``python -m ddpsim simulate``: simulate DDP from a recorded trace or a synthetic workload.

    python -m ddpsim simulate --trace real.json [--bucket-cap-mb X] [--find-unused-parameters]
        [--order torch|reverse|definition|ready|random|3,2,1,0] [--world-size N]
        [--no-sync-every n] [--bandwidth-gbps G] [--latency-us L] [--algo auto|ring|tree|nvls|nvls_tree]
        [--iters K] [--seed S] --out sim.json
    python -m ddpsim simulate --arch resnet50 --hardware a100-nvlink --world-size 64 --out sim.json
    python -m ddpsim simulate --trace gpu_run.json --hardware h100-nvlink --world-size 8

Options left out keep the trace's: a recording's as it ran (world size, bucket cap,
find_unused_parameters, static_graph, no_sync_every from its meta); a SIMULATED trace of a GPU
model's every option (``ddpsim.learn.gpu_model.OPTIONS``: its meta.config but for the limits and
the number of ranks its file kept) and its batch and --tflops.
The last line on stdout is one JSON object: the summary (iteration_time_s,
exposed_comm_s, overlap_fraction, per_bucket, ...).
"""
from __future__ import annotations

import argparse
import json
import sys

from ddpsim.cli.sim_args import (DEFAULT_CAP, DEFAULT_HARDWARE, add_budget_arguments, add_input_arguments,
                                  add_network_source_arguments, cap_mb, check_args, check_gpu_model_args,
                                  check_not_empty, check_recording_args)
from ddpsim.errors import CLIError

# the option a recording cannot run with (ddpsim.analysis.unused.refusal) as its command-line flag
FLAGS = {"find_unused_parameters=False": "--no-find-unused-parameters", "static_graph=True": "--static-graph"}

HELP = "simulate DDP (simpy model) from a recorded trace or a synthetic arch/hardware workload"


CONCURRENCY_HELP = "collectives in flight at once, each at the link's full rate (gloo 2, nccl 1)"
BANDWIDTH_HELP = "per-rank link bandwidth, Gbit/s: a flat ring, in place of a --hardware cluster's NCCL model"
LATENCY_HELP = ("per-step latency alpha, microseconds (alone on a --hardware cluster: the fabric's latency a hop "
                "between nodes, added to NCCL's; sim/plan.resolve_link)")


def add_arguments(p, one_size: bool = True) -> None:
    """``one_size``: --world-size and --out (``scaling`` takes --world-sizes and writes no trace)."""
    add_input_arguments(p)
    d = p.add_argument_group("DDP options and what-ifs (default: the trace's own)")
    if one_size:
        d.add_argument("--world-size", type=int)
    d.add_argument("--bucket-cap-mb", type=cap_mb, help="MiB, or 'default' (torch's 25 MiB with a 1 MiB first bucket); "
                   "another cap than the trace's replaces its bucket_cap_mb_list")
    d.add_argument("--bucket-cap-mb-list", type=float, nargs="+", metavar="MIB",
                   help="a cap per bucket in MiB, the first reduced first, the last repeated (torch 2.13's "
                        "bucket_cap_mb_list; replaces --bucket-cap-mb), e.g. 1 5 25")
    d.add_argument("--first-bucket-cap-mb", type=float, help="override the first bucket's cap")
    d.add_argument("--find-unused-parameters", action=argparse.BooleanOptionalAction, default=None)
    d.add_argument("--static-graph", action=argparse.BooleanOptionalAction, default=None)
    d.add_argument("--broadcast-buffers", action=argparse.BooleanOptionalAction, default=None,
                   help="DDP's broadcast of rank 0's buffers before each forward (default: as recorded)")
    d.add_argument("--skip-all-reduce-unused-params", action=argparse.BooleanOptionalAction, default=None,
                   help="no allreduce for a bucket whose parameters are all unused (torch 2.13; default: as recorded)")
    d.add_argument("--last-bucket-small", action=argparse.BooleanOptionalAction, default=None,
                   help="torch's DDP_SET_LAST_BUCKET_CAP=1: the rebuild's small first cap goes to the bucket "
                        "reduced last (default: as recorded)")
    d.add_argument("--order", help="torch (default), reverse (never rebuilt, as DDP before torch 1.6), definition, "
                                   "ready, random, or indices 3,2,1,0")
    d.add_argument("--uneven", type=int, metavar="K", help="rank r has K x r fewer batches (needs --join)")
    d.add_argument("--comm-hook", metavar="HOOK", help="register_comm_hook what-if: allreduce, fp16, bf16, noop, "
                   "powersgd or round-robin:N (what each sends: ddpsim/sim/comm_hooks.py; its compute at the "
                   "rates the recording's ranks measured, or the GPU profile's)")
    d.add_argument("--powersgd-rank", type=int, help="powersgd: matrix_approximation_rank (torch default 1)")
    d.add_argument("--powersgd-start-iter", type=int, help="powersgd: start_powerSGD_iter (torch default 1000)")
    d.add_argument("--join", action=argparse.BooleanOptionalAction, default=None,
                   help="train inside model.join(): a rank out of data shadows the others' collectives")
    d.add_argument("--no-sync-every", type=int, help="sync every n micro-steps (no_sync in between)")
    d.add_argument("--naive", action=argparse.BooleanOptionalAction, default=None,
                   help="per-parameter allreduce after backward (--no-naive: DDP's buckets, over a trace made with --naive)")
    d.add_argument("--overlap", action=argparse.BooleanOptionalAction, default=None,
                   help="per-parameter allreduce launched from each gradient's hook (OverlapDDP)")
    d.add_argument("--iters", type=int, help="synced steps to simulate (default: --trace at its world size, as many as were "
                   "recorded, unless its ranks shared CPU cores; otherwise 20, or 6 where the steps repeat exactly (--trace), "
                   "a SIMULATED trace of a GPU model's own or 6 (--arch))")
    d.add_argument("--seed", type=int)
    d.add_argument("--jitter", type=float, help="per-step compute time coefficient of variation between ranks "
                   "(default: the trace's measured spread; for --arch the GPU profile's rank_spread)")
    d.add_argument("--jitter-mode", choices=["sampled", "expected"],
                   help="sampled: draw each rank's speed (a trace's default); expected: every rank waits for the "
                        "expected slowest of N (--arch's default; sim/stragglers.py)")
    d.add_argument("--straggler", action="append", default=[], metavar="RANK:FACTOR",
                   help="rank RANK computes FACTOR times slower (repeatable; given, they replace a SIMULATED "
                        "trace's stragglers)")
    n = p.add_argument_group("network")
    n.add_argument("--bandwidth-gbps", type=float, help=BANDWIDTH_HELP)
    n.add_argument("--latency-us", type=float, help=LATENCY_HELP)
    n.add_argument("--algo", choices=["auto", "ring", "tree", "nvls", "nvls_tree"],
                   help="NCCL's allreduce algorithm, as NCCL_ALGO sets it (default auto: NCCL's choice by message size, "
                        "GPUs per node and nodes, on a --hardware cluster; ring on a flat link)")
    n.add_argument("--concurrency", type=int, help=CONCURRENCY_HELP)
    n.add_argument("--interference", type=float, help="compute slowdown while comm runs (0.3 = 30%%)")
    add_network_source_arguments(p)
    add_budget_arguments(p)
    if one_size:
        p.add_argument("--out", help="write the simulated trace here (JSON)")


def load_source(args, world_sizes: list[int] | None = None, trace=None, precheck=None):
    """(workload, the recorded trace or None, the GPU model of a SIMULATED trace or None) from --trace or --arch;
    ``world_sizes``: those the trace will be asked for (default: ``--world-size``). A SIMULATED trace of a GPU
    model is that model (``ddpsim.learn.gpu_model``): its arch, batch and rate on its hardware or on
    ``--hardware``'s, with every option it ran with. A recording asked for another world size with no network
    named first goes through ``experiments.worldsize.prepare`` (Note [Another world size on the user's path]).
    ``trace``: --trace already loaded; ``precheck(workload, trace)``: the flags checked before a measurement
    (``learn_trace``)."""
    from ddpsim.learn import gpu_model
    from ddpsim.sim.archs import synthetic
    from ddpsim.trace import load_trace

    check_not_empty(args)  # before the work: --out '' wrote nothing, --comm-hook '' ran with no hook
    if getattr(args, "bucket_cap_mb", None) is not None and getattr(args, "bucket_cap_mb_list", None):
        cap = args.bucket_cap_mb
        print(f"note: --bucket-cap-mb {cap if cap is DEFAULT_CAP else f'{cap:g}'} is not used: --bucket-cap-mb-list replaces it, as torch's "
              "bucket_cap_mb_list replaces bucket_cap_mb (Note [Caps torch takes] in ddpsim/buckets.py)", file=sys.stderr)
    if bool(args.trace) == bool(args.arch):
        raise ValueError("give exactly one of --trace FILE or --arch NAME")
    if world_sizes is None:
        world_sizes = [args.world_size] if getattr(args, "world_size", None) is not None else []
    trace = trace if trace is not None else load_trace(args.trace) if args.trace else None
    model = gpu_model.of_trace(trace)
    if trace is not None and model is None:
        check_recording_args(args)  # before the ranges: a recording takes no --batch at all
        check_args(args, world_sizes)
        return learn_trace(trace, args, world_sizes, precheck), trace, None
    check_gpu_model_args(args)
    check_args(args, world_sizes)
    if model is not None:
        if model.tflops is not None and args.tflops is None and not gpu_model.same_gpu(args.hardware or model.hardware, model.hardware):
            print(f"note: {args.trace} ran at {model.tflops:g} TFLOP/s (--tflops) on {model.hardware}; {args.hardware} "
                  "runs at its GPU profile's rate: give --tflops to set one", file=sys.stderr)
        return model.workload(args.hardware, args.batch, args.tflops), None, model
    hardware = DEFAULT_HARDWARE if args.hardware is None else args.hardware  # given: checked, not replaced
    return synthetic(args.arch, hardware, batch=args.batch, tflops=args.tflops), None, None


def use_calibration(trace, args) -> None:
    """``--calibration FILE``: the recording's network at other world sizes is the file's fit."""
    if getattr(args, "calibration", None):
        from ddpsim.experiments.calibrate import load_calibration

        trace.meta["calibration"] = load_calibration(args.calibration)


def learn_trace(trace, args, world_sizes: list[int], precheck=None):
    """The workload ``ddpsim.learn.learn`` learns from ``trace``, the network for ``world_sizes`` ready.
    Where that network is measured here first (seconds), ``precheck(workload, trace)`` sees the workload
    learnt without it: a flag the configuration refuses is said before the measurement, not after."""
    from ddpsim.experiments import worldsize
    from ddpsim.learn import learn
    from ddpsim.sim import network
    from ddpsim.trace.profile_sizes import UnknownSizesError, unknown_sizes

    if (why := unknown_sizes(trace)) is not None:  # before a network is asked for at another world size
        raise UnknownSizesError(why)
    use_calibration(trace, args)
    if args.hardware:
        network.parse_hardware(args.hardware)  # a ValueError naming the choices
    elif getattr(args, "bandwidth_gbps", None) is None:
        calibrate = not getattr(args, "no_calibrate", False)
        if precheck is not None and any(worldsize.plan(trace, ws, calibrate).action == "measure" for ws in world_sizes):
            precheck(learn(trace, _concurrency(args)), trace)
        said: list[str] = []  # a line said for several sizes is said once

        def say(msg: str) -> None:
            if msg not in said:
                said.append(msg)
                print(msg, file=sys.stderr, flush=True)

        for ws in world_sizes:
            worldsize.prepare(trace, ws, calibrate=calibrate, log=say)
    return learn(trace, _concurrency(args))  # --hardware: SimConfig.hardware (learn/hardware.py)


def _concurrency(args) -> int | None:
    conc = getattr(args, "concurrency", None)
    return conc if isinstance(conc, int) else None


def parse_order(value):
    if value is None:
        return None
    if any(c.isdigit() for c in value):
        try:
            return [int(x) for x in value.replace(" ", "").split(",")]  # "3,,2": refused, not read as 3,2
        except ValueError:
            raise ValueError(f"--order: {value!r} is neither an order name nor a list of indices") from None
    return value


def parse_stragglers(values) -> dict:
    out = {}
    for v in values or []:
        r, sep, f = v.partition(":")
        try:
            rank, factor = int(r), float(f) if sep else 2.0
        except ValueError:
            raise ValueError(f"--straggler wants RANK:FACTOR (e.g. 3:1.5), not {v!r}") from None
        if rank in out:  # the last one won, silently
            raise ValueError(f"--straggler names rank {rank} twice ({out[rank]:g} and {factor:g}): give it once")
        out[rank] = factor
    return out


FIELDS = {"world_size": "world_size", "bucket_cap_mb": "bucket_cap_mb", "bucket_cap_mb_list": "bucket_cap_mb_list",
          "first_bucket_cap_mb": "first_bucket_cap_mb", "find_unused_parameters": "find_unused_parameters",
          "static_graph": "static_graph", "broadcast_buffers": "broadcast_buffers", "no_sync_every": "no_sync_every", "iters": "iters", "seed": "seed",
          "uneven": "uneven", "join": "join", "comm_hook": "comm_hook", "powersgd_rank": "powersgd_rank",
          "powersgd_start_iter": "powersgd_start_iter", "skip_all_reduce_unused_params": "skip_all_reduce_unused_params",
          "last_bucket_small": "last_bucket_small", "jitter": "jitter", "jitter_mode": "jitter_mode", "bandwidth_gbps": "bandwidth_gbps", "latency_us": "latency_us",
          "algo": "algo", "hardware": "hardware", "concurrency": "concurrency", "interference": "interference",
          "max_events": "max_events", "time_limit_s": "time_limit_s", "naive": "naive", "overlap": "overlap"}


def overrides_from_args(args) -> dict:
    """The SimConfig fields the command line sets (the rest: the trace's, or SimConfig's defaults)."""
    values = {}
    for attr, field in FIELDS.items():
        v = getattr(args, attr, None)
        if v is not None:
            values[field] = None if v is DEFAULT_CAP else v
    order = parse_order(getattr(args, "order", None))
    if order is not None:
        values["order"] = order
    strag = parse_stragglers(getattr(args, "straggler", None))
    if strag:
        values["stragglers"] = strag
    return values


def config_for(workload, trace, values: dict, model=None, source: str | None = None, noise: str = "recorded"):
    """The SimConfig of ``values`` over the trace's replay (``learn.replay_config``, with its ``noise``), a
    SIMULATED trace's GPU ``model`` (``GpuModel.sim_config``: its options under them; ``source``, the trace's
    file) or --arch's defaults; checked as ``check_config`` checks it."""
    from ddpsim.analysis.unused import refusal
    from ddpsim.learn import gpu_model, replay_config

    if model is not None:
        cfg = model.sim_config(workload, values, source)
    elif trace is None:
        cfg = gpu_model.make_config(workload, values)
    else:
        cfg = replay_config(workload, trace, noise=noise, **values)
        if (refused := refusal(trace, cfg.find_unused_parameters, cfg.static_graph)):
            raise CLIError(f"{FLAGS[refused[0]]}: {refused[1]}")
        cfg.validate()
    check_config(workload, cfg, values)
    return cfg


def check_config(workload, cfg, values: dict) -> None:
    """What SimConfig.validate leaves to the simulation, checked before it (and before a measurement:
    ``learn_trace``): --order's indices against the workload's parameters, the PowerSGD flags given
    (``values``) against the hook."""
    from ddpsim.sim.workload import param_order

    if isinstance(cfg.order, (list, tuple)):
        param_order(workload, cfg.order)
    start = values.get("powersgd_start_iter")
    if cfg.comm_hook != "powersgd" and (values.get("powersgd_rank") is not None or start is not None):
        raise CLIError("--powersgd-rank and --powersgd-start-iter need --comm-hook powersgd "
                       f"(this simulation's hook is {cfg.comm_hook or 'none'})")
    if start is not None and start < 2:  # as record refuses it
        raise CLIError(f"--powersgd-start-iter must be at least 2, not {start}: torch's PowerSGDState refuses "
                       "start_powerSGD_iter <= 1 with error feedback or warm start (its defaults)")


def main(args) -> int:
    from ddpsim.analysis.join import join_line
    from ddpsim.cli.summary_text import summary_lines
    from ddpsim.sim.api import simulate
    from ddpsim.trace.same_run import quiet_ranks

    values = overrides_from_args(args)
    workload, recorded, model = load_source(args, precheck=lambda w, t: config_for(w, t, values, None, args.trace))
    if recorded is not None and (quiet := quiet_ranks(recorded)):
        print(f"note: {quiet[0].lower()}{quiet[1:]}", file=sys.stderr)
    cfg = config_for(workload, recorded, values, model, args.trace)
    trace, summary = simulate(workload, cfg)
    if cfg.comm_hook == "powersgd" and cfg.powersgd_start_iter >= cfg.iters:  # else the same numbers as no hook
        print(f"note: PowerSGD starts at synced step {cfg.powersgd_start_iter} (start_powerSGD_iter; torch's default "
              f"1000) and the {cfg.iters} simulated steps are all before it, so they are plain allreduces: give "
              "--powersgd-start-iter 2 and more --iters than that to see PowerSGD itself", file=sys.stderr)
    if args.out:  # save_trace makes a folder not there yet (trace/writer.write_text)
        from ddpsim.trace import save_trace

        save_trace(trace, args.out)
    print(f"simulated {workload.name}: world size {cfg.world_size}, {summary['n_buckets']} bucket{'s' * (summary['n_buckets'] != 1)}, "
          f"{len(trace.longest_rank.iterations)} iterations" + (f" -> {args.out}" if args.out else ""))
    wall = summary.pop("sim_wall_s")
    print("\n".join(summary_lines(workload, cfg, summary, simulate)))
    if (joined := join_line(trace)) is not None:
        print(joined)
    print(f"simulated in {wall:.2f} s", file=sys.stderr)  # wall time: stdout stays deterministic
    print(json.dumps(summary, separators=(",", ":"), default=str))
    return 0
