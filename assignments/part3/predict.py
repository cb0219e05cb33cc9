"""Part 3: predict, then measure (starter file).

Read HANDOUT.md first. Fill in TODO 1-4 (and 2b). Grade yourself with:

    python -m ddpsim.grade part3 assignments/part3/predict.py
"""
from __future__ import annotations

from ddpsim import load_trace
from ddpsim.grade import assignments_dir
from ddpsim.learn import learn, sweep
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record

# Given: the model, the network and the candidates (do not change).
MODEL = "transformer"  # ddpsim's zoo transformer (tied embedding/head)
WORLD_SIZE = 2  # two ranks on this machine's loopback gloo network
# A real run at the default cap whose ranks also timed allreduces of 4 KiB to 8 MiB between its
# iterations (meta.calibration: this machine's allreduce latency and bandwidth).
BASELINE = assignments_dir() / "part3" / "baseline.json"
CANDIDATES_MB = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 25]
REAL_ITERS = 20
# The link you are sizing for next: the same model on 2 machines joined by a slow link
# (250 Mbit/s, 3 ms per message), each with communication off the compute core (like a GPU's
# own copy engines): the simulator's what-if options, SimConfig fields given as a dict.
LINK = {"shared_core": False, "bandwidth_gbps": 0.25, "latency_us": 3000.0}


def predict_sweep() -> list[dict]:
    """TODO 1: simulate every candidate cap; return the rows of ddpsim.learn.sweep.

    Learn from the baseline the way `python -m ddpsim validate`, `sweep --trace` and the What-if
    page do: ddpsim.learn.sweep(load_trace(BASELINE), {"bucket_cap_mb": CANDIDATES_MB}). It learns
    the workload (ddpsim.learn.learn: each gradient's backward time, calibrated against the run's
    own phases, and the allreduce line its ranks measured) and replays the recorded run (its 2
    ranks, as many steps as it recorded) with each cap in place of the default.
    learn(load_trace(BASELINE)).link shows the network it learnt.
    """
    raise NotImplementedError("TODO 1: predict_sweep() in predict.py")


def choose_bucket_cap_mb() -> float:
    """TODO 2: the candidate with the smallest simulated iteration_time_s."""
    raise NotImplementedError("TODO 2: choose_bucket_cap_mb() in predict.py")


def choose_link_cap_mb() -> float:
    """TODO 2b: the candidate with the smallest simulated iteration_time_s over LINK.

    The same sweep, with LINK as its base: ddpsim.learn.sweep(trace, grid, LINK) replays the run
    with LINK's fields changed (a dict base changes the replay; a SimConfig would replace it).
    """
    raise NotImplementedError("TODO 2b: choose_link_cap_mb() in predict.py")


ANSWER = """
TODO 3: in 80-200 words, say which caps you chose and why: what does each allreduce cost on
this machine, and so what do small buckets cost here; why are the larger caps so close; what do
very small buckets cost over LINK, and what does one big bucket cost; what did your real run
show against the prediction, and how much do runs on this machine vary?
"""


def confirm(out_path):
    """TODO 4: record a real 2-rank run at your chosen cap into ``out_path``; return the Trace.

    Use ddpsim.record.launcher.record(RecordConfig(model=MODEL, world_size=WORLD_SIZE,
    iters=REAL_ITERS, bucket_cap_mb=...), out_path). Then compare
    ddpsim.analysis.summarize(trace)["iteration_time_s"] with the prediction in your ANSWER.
    """
    raise NotImplementedError("TODO 4: confirm(out_path) in predict.py")
