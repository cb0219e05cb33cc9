"""``python -m ddpsim scaling``: the same options at several world sizes, the What-if page's scaling curve
as a table.

    python -m ddpsim scaling --arch resnet50 --hardware v100-ib100
    python -m ddpsim scaling --trace run.json --world-sizes 2,4,8 --bucket-cap-mb 5

Each size is simulated as ``simulate`` simulates one, twice (``ddpsim.learn.scaling``): the iteration
split into compute, exposed communication and waiting for the slowest rank, each rank's efficiency
against one rank, and NCCL's choice for the largest bucket. A recording's ranks are drawn around their
medians at every size, its own too, as the page's curve draws them (no step where a replay of the
recorded ranks would stand). A size whose network is not known (a GPU recording with no network named,
say: ``experiments.worldsize.plan``) or that the simulator refuses is left out, with a note on stderr.
The last line on stdout is one JSON object: {"rows": [...]}.
"""
from __future__ import annotations

import json
import re
import sys

from ddpsim.cli import simulate as simulate_cli
from ddpsim.cli.progress import progress_bar
from ddpsim.errors import CLIError

HELP = "simulate the same options at several world sizes: each iteration split into compute, exposed comm and waiting"


def world_sizes(value: str) -> list[int]:
    """--world-sizes' value: "1,8,64" as [1, 8, 64], sorted, each once."""
    from ddpsim.sim.budget import LIMITS, _num

    try:  # "2,,4" is refused, not read as 2,4
        sizes = sorted({int(v) for v in value.replace(" ", "").split(",")})
    except ValueError:
        raise ValueError(f"--world-sizes wants integers separated by commas (e.g. 1,8,64), not {value!r}") from None
    lo, hi, _ = LIMITS["world_size"]
    if not sizes or not lo <= sizes[0] <= sizes[-1] <= hi:
        raise ValueError(f"--world-sizes wants world sizes between {_num(lo)} and {_num(hi)} ranks, not {value!r}")
    return sizes


def ranks(sizes: list[int]) -> str:
    """"1 rank", "8, 64 ranks"."""
    return f"{', '.join(f'{n:,}' for n in sizes)} rank{'s' * (sizes != [1])}"


def grouped(refused: dict[int, str]) -> list[str]:
    """One note per reason for the sizes left out (``refused``: size -> the simulator's message, which
    may name its size as "N ranks": the sizes of one reason are those whose messages differ only there)."""
    by: dict[str, list[int]] = {}
    for ws, msg in refused.items():
        by.setdefault(re.sub(rf"\b({ws}|{ws:,})(?= ranks?\b)", "N", msg), []).append(ws)
    return [f"{ranks(sizes)} left out: {refused[sizes[0]]}" for sizes in by.values()]


def add_arguments(p) -> None:
    from ddpsim.learn.scaling import WORLD_SIZES

    simulate_cli.add_arguments(p, one_size=False)
    p.add_argument("--world-sizes", metavar="N,N,...", help="ranks to simulate, separated by commas (default: the "
                   f"What-if page's, {', '.join(f'{n:,}' for n in WORLD_SIZES)}, and a recording's own)")


def known_sizes(recording, args, sizes: list[int]) -> tuple[list[int], list[str]]:
    """(the sizes ``recording``'s network is known at or can be measured at here, a note on those left out):
    every size where a network is named (--hardware, --bandwidth-gbps) or there is no recording (a GPU model)."""
    from ddpsim.experiments import worldsize

    if recording is None or args.hardware or args.bandwidth_gbps is not None:
        return sizes, []
    simulate_cli.use_calibration(recording, args)  # before the plans, which read it (load_source reads it again)
    plans = {ws: worldsize.plan(recording, ws, calibrate=not args.no_calibrate) for ws in sizes}
    refused = [ws for ws, p in plans.items() if p.action == "refuse"]
    if not refused:
        return sizes, []
    why = plans[refused[0]].short or plans[refused[0]].message
    return ([ws for ws in sizes if ws not in refused],
            [f"{ranks(refused)} left out: {why} (give --hardware GPU-NETWORK or --bandwidth-gbps G)"])


def prechecked(args, values: dict, sizes: list[int]):
    """``load_source``'s precheck (before a measurement: simulate_cli.learn_trace): the flags refused at every
    size are said then, in the line they end the command with after it."""
    def precheck(workload, recording) -> None:
        why = {}
        for ws in sizes:
            try:
                simulate_cli.config_for(workload, recording, {**values, "world_size": ws}, None, args.trace,
                                        noise="drawn")
                return
            except CLIError:
                raise
            except ValueError as e:
                why[ws] = str(e)
        raise ValueError(f"no world size could be simulated ({grouped(why)[0]})")
    return precheck


def rows_for(args) -> tuple[str, list[dict], list[str]]:
    """(the workload's name, one row per size simulated, the notes on sizes left out)."""
    from ddpsim.learn import gpu_model
    from ddpsim.learn.scaling import WORLD_SIZES, split, with_efficiency
    from ddpsim.sim.api import simulate
    from ddpsim.sim.budget import SimulationTooLarge
    from ddpsim.trace import load_trace

    simulate_cli.check_not_empty(args)  # the flags first: nothing read yet
    sizes = world_sizes(args.world_sizes) if args.world_sizes is not None else list(WORLD_SIZES)
    trace = load_trace(args.trace) if args.trace else None
    recording = trace if trace is not None and gpu_model.of_trace(trace) is None else None  # learnt from
    if recording is not None and args.world_sizes is None:
        sizes = sorted({*sizes, recording.world_size})  # a recording's own size, as the page's slider has it
    kept, notes = known_sizes(recording, args, sizes)
    if not kept:
        raise ValueError(notes[0])
    values, rows, refused, auto = simulate_cli.overrides_from_args(args), [], {}, []
    workload, recorded, model = simulate_cli.load_source(args, kept, trace, prechecked(args, values, kept))

    def row(ws: int, fields: dict) -> dict:
        cfg = simulate_cli.config_for(workload, recorded, {**values, **fields, "world_size": ws}, model, args.trace,
                                      noise="drawn")
        return split(ws, simulate, workload, cfg)

    show = progress_bar("simulating", "world sizes")
    for n, ws in enumerate(kept):
        if show:
            show(n, len(kept))
        try:
            rows.append(row(ws, {}))
            continue
        except SimulationTooLarge as e:  # too large at this size (ranks sharing CPU cores, --max-events): leave it out
            refused[ws] = str(e)
            continue
        except CLIError:  # an option the recording cannot run with, at any size
            raise
        except ValueError as e:  # the simulator refuses this size: say so, keep the others
            refused[ws] = str(e)
        if values.get("algo") not in (None, "auto"):  # a chosen NCCL algorithm that does not run here:
            try:  # NCCL's choice, as on the What-if page's curve
                rows.append(row(ws, {"algo": None}))
                del refused[ws]
                auto.append(ws)
            except ValueError:
                pass
    if show:
        show(len(kept), len(kept))
    if auto:
        notes.append(f"{values['algo']} does not run at {ranks(auto)}: NCCL's choice there")
    return workload.name, with_efficiency(rows), notes + grouped(refused)


def table(rows: list[dict]) -> list[str]:
    """The rows as aligned text, times in ms."""
    head = f"{'ranks':>8}  {'iteration':>10}  {'compute':>10}  {'exposed':>9}  {'waiting':>9}  {'efficiency':>10}  NCCL"
    out = [head, f"{'':>8}  {'ms':>10}  {'ms':>10}  {'ms':>9}  {'ms':>9}"]
    for r in rows:
        eff = "" if r["efficiency"] is None else f"{r['efficiency']:.1%}"
        out.append(f"{r['world_size']:>8,}  {r['iteration_time_s'] * 1e3:>10.3f}  {r['compute_s'] * 1e3:>10.3f}  "
                   f"{r['exposed_comm_s'] * 1e3:>9.3f}  {r['waiting_s'] * 1e3:>9.3f}  {eff:>10}  {r['nccl'] or '-'}")
    return out


def main(args) -> int:
    name, rows, notes = rows_for(args)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if not rows:
        raise ValueError(f"no world size could be simulated ({notes[0]})")
    print(f"scaling {name} (SIMULATED): the same options at {len(rows)} world size{'s' * (len(rows) != 1)}; "
          "iteration = compute + exposed comm + waiting for the slowest rank")
    print("\n".join(table(rows)))
    print(json.dumps({"rows": rows}, separators=(",", ":")))
    return 0
