"""Part 3: predict, then measure (starter file).

Read HANDOUT.md first. Fill in TODO 1-4 (and 2b). Grade yourself with:

    python -m ddpsim.grade part3 assignments/part3/predict.py
"""
from __future__ import annotations

from ddpsim import load_trace
from ddpsim.grade import assignments_dir
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record
from ddpsim.learn import sweep, workload_from_trace
from ddpsim.sim import SimConfig

# Given: the model, the network and the candidates (do not change).
MODEL = "transformer"  # ddpsim's zoo transformer (tied embedding/head)
WORLD_SIZE = 2  # two ranks on this machine's loopback gloo network
BASELINE = assignments_dir() / "part3" / "baseline.json"  # a real run at the default cap
CANDIDATES_MB = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 25]
SIM_ITERS = 4
REAL_ITERS = 5
# The link you are sizing for next: the same model on 2 machines joined by a slow link
# (250 Mbit/s, 3 ms per message), each with communication off the compute core (like a GPU's
# own copy engines): the simulator's what-if options, passed to SimConfig.
LINK = {"shared_core": False, "bandwidth_gbps": 0.25, "latency_us": 3000.0}


def predict_sweep() -> list[dict]:
    """TODO 1: simulate every candidate cap; return the rows of ddpsim.sim.sweep.

    Build the workload from the baseline trace (workload_from_trace(load_trace(BASELINE))):
    it carries the model's per-gradient backward times and this machine's fitted network.
    Sweep {"bucket_cap_mb": CANDIDATES_MB} with SimConfig(world_size=WORLD_SIZE, iters=SIM_ITERS).
    """
    raise NotImplementedError("TODO 1: predict_sweep() in predict.py")


def choose_bucket_cap_mb() -> float:
    """TODO 2: the candidate with the smallest simulated iteration_time_s."""
    raise NotImplementedError("TODO 2: choose_bucket_cap_mb() in predict.py")


def choose_link_cap_mb() -> float:
    """TODO 2b: the candidate with the smallest simulated iteration_time_s over LINK.

    The same sweep, with SimConfig(world_size=WORLD_SIZE, iters=SIM_ITERS, **LINK).
    """
    raise NotImplementedError("TODO 2b: choose_link_cap_mb() in predict.py")


ANSWER = """
TODO 3: in 80-200 words, say which caps you chose and why: why does the cap barely matter on
this machine, what do very small buckets cost over LINK, what does one big bucket cost, and
what did your real run show against the prediction?
"""


def confirm(out_path):
    """TODO 4: record a real 2-rank run at your chosen cap into ``out_path``; return the Trace.

    Use ddpsim.record.launcher.record(RecordConfig(model=MODEL, world_size=WORLD_SIZE,
    iters=REAL_ITERS, bucket_cap_mb=...), out_path). Then compare its summary()
    ["iteration_time_s"] with the prediction in your ANSWER.
    """
    raise NotImplementedError("TODO 4: confirm(out_path) in predict.py")
