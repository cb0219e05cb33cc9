"""Re-record the bundled sample traces in ddpsim/samples/.

    python -m ddpsim.samples.regenerate [--only NAME ...]

Most samples are real recordings by ``ddpsim.record`` (gloo on this CPU machine),
kept small: few iterations and 2 ranks, with torch's DDP and with ddpsim's readable
DDP (minddp). Samples named ``*_sim_*`` are SIMULATED by ``ddpsim.sim`` on GPU
hardware profiles (datasheet figures, NCCL-like one-collective-at-a-time links),
where bucket size matters (1.5-2x on 25 GbE; Li et al., VLDB 2020, report up to 2x); on this 2-core
CPU it barely does. Samples named ``*_h100_*`` are real GPU runs: the PyTorch-profiler
traces in ``ddpsim/samples/h100/`` imported as ``ddpsim import`` does. File names sort in the order a
learner should meet them; the
first is the dashboard's default.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from ddpsim.analysis import summarize
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record
from ddpsim.samples import BUNDLED_DIR, H100_DIR
from ddpsim.trace import save_trace

# name -> what to record (2 ranks; iterations: 0 = single bucket, 1 = rebuilt, then steady)
SAMPLES = {
    "01_mlp_torch_default": RecordConfig(model="mlp", iters=5),
    "02_mlp_torch_cap0.25": RecordConfig(model="mlp", iters=5, bucket_cap_mb=0.25),
    "03_shuffled_torch_default": RecordConfig(model="shuffled", iters=5),
    "04_branchy_torch_find_unused": RecordConfig(model="branchy", iters=5, find_unused_parameters=True),
    "05_convnet_torch_no_sync3": RecordConfig(model="convnet", iters=6, no_sync_every=3),
    "06_transformer_torch_default": RecordConfig(model="transformer", iters=5),
    "07_mlp_minddp_default": RecordConfig(model="mlp", iters=5, impl="minddp"),
    "08_branchy_minddp_find_unused": RecordConfig(model="branchy", iters=5, impl="minddp",
                                                  find_unused_parameters=True),
}


@dataclass
class SimSample:
    """A simulated sample: ``ddpsim.sim.synthetic(arch, hardware)`` under SimConfig(**config), with the
    GPU model's defaults (``archs.arch_defaults``: its rank noise) as ``simulate --arch`` takes them."""

    arch: str
    hardware: str
    config: dict = field(default_factory=dict)


# Simulated GPU runs (labelled SIMULATED in the app): 3 synced steps, 2 of the ranks kept.
_SIM = {"iters": 3, "trace_ranks": 2}
SAMPLES.update({
    "20_sim_resnet50_v100-eth25_w64_default": SimSample("resnet50", "v100-eth25", {"world_size": 64, **_SIM}),
    "21_sim_resnet50_v100-eth25_w64_cap0.25": SimSample("resnet50", "v100-eth25",
                                                        {"world_size": 64, "bucket_cap_mb": 0.25, **_SIM}),
    "22_sim_resnet50_v100-eth25_w64_cap100": SimSample("resnet50", "v100-eth25",
                                                       {"world_size": 64, "bucket_cap_mb": 100, **_SIM}),
    "23_sim_resnet50_v100-eth25_w64_find_unused": SimSample(
        "resnet50", "v100-eth25", {"world_size": 64, "find_unused_parameters": True, **_SIM}),
    "24_sim_bert-large_a100-eth100_w64_default": SimSample("bert-large", "a100-eth100",
                                                           {"world_size": 64, **_SIM}),
    "25_sim_bert-large_a100-eth100_w64_cap100": SimSample("bert-large", "a100-eth100",
                                                          {"world_size": 64, "bucket_cap_mb": 100, **_SIM}),
})


@dataclass
class ImportedSample:
    """A real GPU run: Kineto profiles in ddpsim/samples/h100/, one per rank, imported; ``notes``: what
    the profiles cannot say about the run (``import --note``; the Timeline shows them)."""

    profiles: list[str]
    notes: list[str] = field(default_factory=list)


# Recorded on a GPU by `record` (NCCL, CUDA-event times; re-made only where a GPU is visible):
# ResNet-50 at one rank on an NVIDIA H200 (torch 2.11.0+cu130, NCCL 2.28.9), from `ddpsim selfcheck --gpu`.
SAMPLES["11_h200_resnet50_nccl_1rank"] = RecordConfig(model="ddpsim.models.resnet:resnet50", world_size=1,
                                                      backend="nccl", iters=8)

# Real H100 runs (ddpsim/samples/h100/README.md): ResNet-18, two ranks sharing the GPU with gloo.
SAMPLES["10_h100_resnet18_gloo_2ranks"] = ImportedSample(
    [f"resnet18_gloo_ws2_rank{r}.kineto.json.gz" for r in (0, 1)],
    ["the two ranks ran on one H100 (ddpsim/samples/h100/README.md): their kernels took turns on the GPU and "
     "gloo copied each allreduce through the host, so the recorded compute includes that sharing; a what-if at "
     "other world sizes gives each rank this compute, where one GPU per rank may run faster"])


def _make(spec, out):
    if isinstance(spec, ImportedSample):
        from ddpsim.trace.profile_import import import_profiles

        trace = import_profiles([H100_DIR / f for f in spec.profiles], notes=spec.notes)  # as import --note
        save_trace(trace, out)
        return trace
    if isinstance(spec, SimSample):
        from ddpsim.sim import SimConfig, simulate, synthetic
        from ddpsim.sim.archs import arch_defaults

        work = synthetic(spec.arch, spec.hardware)  # as simulate --arch runs it: its GPU profile's rank noise
        trace, _ = simulate(work, SimConfig(**{**arch_defaults(work), **spec.config}))
        save_trace(trace, out)
        return trace
    return record(spec, out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None, help="sample names to re-record")
    args = ap.parse_args(argv)
    names = args.only or list(SAMPLES)
    for name in names:
        if name not in SAMPLES:
            print(f"unknown sample {name!r}; known: {', '.join(SAMPLES)}", file=sys.stderr)
            return 2
        out = BUNDLED_DIR / f"{name}.json"
        trace = _make(SAMPLES[name], out)
        s = summarize(trace)
        print(f"{out.name}: iteration {s['iteration_time_s'] * 1e3:.1f} ms, "
              f"overlap {s['overlap_fraction']:.0%}, {out.stat().st_size // 1024} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
