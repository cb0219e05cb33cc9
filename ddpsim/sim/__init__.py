"""ddpsim.sim: a simpy discrete-event model of PyTorch DDP (torch 2.13 semantics).

    >>> from ddpsim.sim import simulate, sweep, synthetic, SimConfig
    >>> w = synthetic("resnet50", "a100-nvlink")
    >>> trace, summary = simulate(w, SimConfig(world_size=8, bucket_cap_mb=25))
    >>> rows = sweep(w, {"bucket_cap_mb": [1, 5, 25, 100]}, SimConfig(world_size=64))

The simulator takes a ``Workload``; a recorded ``Trace`` goes through ``ddpsim.learn``
(``ddpsim.learn.simulate(trace)`` learns the workload, then calls this one). Modules:
workload (params, timings, bucket layouts), network (Link cost models, hardware
profiles), model (the simpy processes), api (SimConfig, simulate, rank groups),
archs (ResNet-50, BERT-large, GPT-2 tables), sweep; dataparallel and dp_compare (a SIMULATED
nn.DataParallel iteration beside DDP's, docs/dataparallel.md). See docs/architecture.md.
"""
from ddpsim.sim.api import SimConfig, simulate
from ddpsim.sim.archs import synthetic
from ddpsim.sim.network import Link
from ddpsim.sim.sweep import sweep
from ddpsim.sim.workload import ParamSpec, Workload, compute_bucket_assignment

__all__ = ["SimConfig", "simulate", "sweep", "synthetic", "Link", "ParamSpec", "Workload", "compute_bucket_assignment"]
