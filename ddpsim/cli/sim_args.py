"""The input, network-source and limit options ``simulate`` and ``sweep`` share, and their checks made
before a workload exists: what each input takes (a recording, a SIMULATED trace of a GPU model, --arch)."""
from __future__ import annotations

DEFAULT_HARDWARE = "a100-nvlink"  # --arch's GPU and network when --hardware is left out
DEFAULT_CAP = "default"  # --bucket-cap-mb default: torch's bucket_cap_mb=None, also over a trace recorded with a cap
GPU_MODEL = "--arch or a SIMULATED trace of a GPU model (simulate --arch --out)"


def add_input_arguments(p) -> None:
    src = p.add_argument_group("input (one of)")
    src.add_argument("--trace", help="a recording (ddpsim record or import) to learn the workload from, or a SIMULATED "
                     "trace of a GPU model (simulate --arch --out) to simulate that model again with every option it "
                     "ran with (its steps and seed too; flags given change them)")
    src.add_argument("--arch", help="synthetic workload: resnet50, bert-large or gpt2")
    src.add_argument("--hardware",
                     help="GPU-NETWORK, e.g. v100-ib100, a100-nvlink, h100-ib400: --arch's GPU and network "
                          f"(default {DEFAULT_HARDWARE}); with --trace, the network to simulate other world "
                          "sizes over (NVLink inside a node, the fabric between nodes; hardware/*.json); the compute stays "
                          "the recorded GPU's, with the slowdown its collectives caused where they were NCCL's (a SIMULATED trace of a "
                          "GPU model: its arch and batch on that GPU and network)")
    src.add_argument("--batch", type=int, help="per-rank batch size for --arch or a SIMULATED trace of a GPU model; "
                     "refused with a recording (its batch is the one it ran)")
    src.add_argument("--tflops", type=float, help="effective device rate overriding the GPU profile's, for --arch or a "
                     "SIMULATED trace of a GPU model; refused with a recording (its compute is as measured)")


def cap_mb(value: str):
    """--bucket-cap-mb's value: a number of MiB, or "default"."""
    return DEFAULT_CAP if value == DEFAULT_CAP else float(value)


def add_network_source_arguments(p) -> None:
    """--calibration and --no-calibrate: the network at a world size the trace was not recorded at."""
    n = p.add_argument_group("another world size than the trace's (Note [Another world size on the user's path])")
    n.add_argument("--calibration", metavar="FILE", help="a recording's allreduce at other world sizes: `ddpsim calibrate "
                   "--world-sizes ... --save FILE` (or a trace holding meta.calibration); a GPU model's network "
                   "has its own at every size")
    n.add_argument("--no-calibrate", action="store_true",
                   help="a CPU trace recorded here: do not measure the allreduce at the new world size (the "
                        "prediction then carries no measurement at that size)")


def add_budget_arguments(p) -> None:
    from ddpsim.sim.budget import DEFAULT_MAX_EVENTS

    b = p.add_argument_group("limits")
    b.add_argument("--max-events", type=int,
                   help=f"refuse a simulation estimated to need more events (default {DEFAULT_MAX_EVENTS:,})")
    b.add_argument("--time-limit", dest="time_limit_s", type=float,
                   help="stop a simulation that runs longer than this many seconds (default: none)")


# the text options an empty value would turn off or leave to a default unsaid (--comm-hook '' ran with no hook)
TEXT_FLAGS = ("trace", "arch", "hardware", "comm_hook", "order", "calibration")


def check_not_empty(args) -> None:
    """One line for a text option given empty, before anything is read: it would silently mean 'not given'."""
    from ddpsim.trace.writer import refuse_empty, refuse_input

    refuse_empty(getattr(args, "out", None), "--out")
    refuse_input(getattr(args, "out", None), [getattr(args, "trace", None), getattr(args, "calibration", None)])
    for name in TEXT_FLAGS:
        if getattr(args, name, None) == "":
            raise ValueError(f"--{name.replace('_', '-')} wants a value, not an empty one (leave it out for the default)")


def check_args(args, world_sizes: list) -> None:
    """Ranges of the options used before a SimConfig exists (the rest: SimConfig.validate), with one
    message for a world size out of range whatever the input."""
    import math

    from ddpsim.sim.budget import LIMITS, _num
    from ddpsim.sim.config import ARCH_LIMITS  # --batch, --tflops: a simulated trace's meta.workload takes them too

    for name, (lo, hi) in [*ARCH_LIMITS.items(), ("concurrency", LIMITS["concurrency"][:2])]:
        v = getattr(args, name, None)
        if isinstance(v, (int, float)) and not (math.isfinite(v) and lo <= v <= hi):
            raise ValueError(f"--{name} must be between {_num(lo)} and {_num(hi)}, not {v!r}")
    lo, hi, _ = LIMITS["world_size"]
    for ws in world_sizes:  # before anything is measured for them
        if not (isinstance(ws, int) and lo <= ws <= hi):
            raise ValueError(f"--world-size must be between {_num(lo)} and {_num(hi)} ranks, not {ws!r}")


def check_recording_args(args) -> None:
    """The input flags a recording cannot take: its workload is learnt as it ran."""
    for flag, why in (("batch", "its batch is the one it ran"), ("tflops", "its compute is as it was measured")):
        if getattr(args, flag, None) is not None:
            raise ValueError(f"--{flag} applies to {GPU_MODEL}, not to a recording ({args.trace}): {why}")


def check_gpu_model_args(args) -> None:
    """The flags a GPU model (--arch, or a SIMULATED trace of one) cannot take: a recording's network."""
    for flag, given in (("--calibration", getattr(args, "calibration", None)),
                        ("--no-calibrate", getattr(args, "no_calibrate", False))):
        if given:
            raise ValueError(f"{flag} applies to a recording (ddpsim record or import): a GPU model's network "
                             "(--hardware) prices the allreduce at every world size")
