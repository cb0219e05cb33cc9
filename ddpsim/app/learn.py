"""Plain-language explanations shown beside each view and on the Learn page.

Each topic cites where the claim comes from: the paper (Li et al., VLDB 2020), the
PyTorch DDP design note, or torch's reducer.cpp, or what was measured on this machine.
No Streamlit here: the texts are data.
"""
from __future__ import annotations

from dataclasses import dataclass

PAPER = ('Li et al., "PyTorch Distributed: Experiences on Accelerating Data Parallel Training", '
         "VLDB 2020 ([arXiv:2006.15704](https://arxiv.org/abs/2006.15704))")
NOTE = "the PyTorch DDP design note (https://pytorch.org/docs/stable/notes/ddp.html)"
REDUCER = "`torch/csrc/distributed/c10d/reducer.cpp`"

CPU_NOTE = ("Real recordings here ran on a 2-core CPU with gloo: gloo's allreduce threads compete "
            "with backward for the same two cores, so bucket size and find_unused_parameters barely "
            "change the iteration time in them. That is a lesson too: overlap only helps when "
            "communication has its own hardware. The simulated GPU runs show the large differences.")
# the What-if page on such a recording, where a prediction may move more than the real runs did
WHATIF_CPU_NOTE = ("Real runs on this 2-core CPU move little with the bucket size (the bundled mlp: 39.4 ms at "
                   "torch's default cap, 39.0 ms at 0.25 MiB): gloo's threads compete with backward for the "
                   "cores. Where this what-if predicts a larger change, treat it as the CPU model's guess and "
                   "record the change to check it: ddpsim's CPU model is a test bench (docs/accuracy.md). On GPUs, "
                   "where communication has its own hardware, the bucket size matters more.")


@dataclass(frozen=True)
class Topic:
    title: str
    text: str


TOPICS = {
    "reverse": Topic("Gradients become ready in reverse", f"""
**Gradients become ready in reverse.** Backward runs the model from its output back to its
input, so the last layer's gradients are ready first and the first layer's last. DDP
puts a hook on every parameter's gradient accumulator; when it fires, the gradient is
copied into its bucket ({REDUCER}: `autograd_hook` -> `mark_variable_ready`). That is why
DDP's construction layout guesses *reverse* definition order: bucket 0 holds the last-defined
parameters, whose gradients arrive first, so it can be sent while backward is still
computing the rest ({NOTE}; {PAPER}, section 3.2.3). In torch 2.13 that guess is kept only with
`find_unused_parameters=True`; by default the buckets are rebuilt after iteration 0 in the order
the gradients really arrived (see "Iteration 0 and the rebuild")."""),
    "buckets": Topic("Buckets", f"""
**Buckets.** Sending every gradient on its own costs a network latency each time;
sending them all at the end overlaps nothing. DDP groups gradients into buckets of about
`bucket_cap_mb` MiB (default 25) and starts one allreduce per bucket as soon as the bucket
is full ({PAPER}, section 3.2.2, which measured allreduce time against message size). A
bucket closes once it reaches the cap, so it can overshoot by one parameter; a parameter
is never split ({REDUCER}: `compute_bucket_assignment_by_size`)."""),
    "order": Topic("Allreduces launch in bucket order", f"""
**Allreduces launch in bucket order.** Every rank must run the same collectives in the same
order, or they would pair up the wrong buckets. So a bucket that is ready waits until every
lower-numbered bucket has launched (the dashed tail after a triangle): bucket *i* launches
only after buckets 0..i-1 ({REDUCER}: `mark_bucket_ready`; {NOTE}). A bad ordering (e.g.
definition order, where bucket 0 is filled last) makes every bucket wait for the end of
backward."""),
    "rebuild": Topic("Iteration 0 and the rebuild", f"""
**Iteration 0 and the rebuild.** In torch 2.x with the default `find_unused_parameters=False`,
DDP does not yet know the real gradient order, so iteration 0 puts all parameters into one
bucket: one allreduce after the whole backward, no overlap. It records the order in which
gradients arrived and, at the next forward, rebuilds the buckets in that order (the first
bucket gets a small 1 MiB cap when `bucket_cap_mb` is left at its default); rank 0's layout is
broadcast so all ranks agree ({REDUCER}: `rebuild_buckets`, `sync_bucket_indices`).
Compare iteration 0 and iteration 1 on the Timeline page."""),
    "overlap": Topic("Overlap and exposed communication", f"""
**Overlap and exposed communication.** While backward still computes earlier layers, the
allreduces of finished buckets run at the same time. What is left after the last gradient is
ready, waiting for the last allreduce, is *exposed communication* (hatched): it adds directly
to the iteration time. Overlapping communication with backward is the main speed-up of DDP
over reducing after backward ({PAPER}, section 3.2.3; {NOTE})."""),
    "find_unused": Topic("find_unused_parameters", f"""
**find_unused_parameters.** If some parameters get no gradient in an iteration, their buckets
would never be full and never be reduced. With `find_unused_parameters=True`, DDP walks
the autograd graph after forward (the dashed box), marks the unreached parameters ready (with
zeros) when the first gradient hook of the backward fires, so every bucket still launches,
and allreduces a small "used parameters" bitmap after the last bucket (the dark bar). It costs a
graph traversal each iteration, and the buckets are never rebuilt ({REDUCER}:
`search_unused_parameters`, `all_reduce_local_used_map`; {NOTE}). Without it, a model with an
unused parameter fails at the next forward with "Expected to have finished reduction in the
prior iteration"."""),
    "static_graph": Topic("static_graph", f"""
**static_graph.** With `static_graph=True` you promise that the same parameters take part in
every iteration. DDP then learns the graph once, without ever walking it: its first iteration
counts which parameters' hooks fire, delays every allreduce to the end of the backward
(`delay_all_reduce`: no overlap) and allreduces the used-parameter bitmap; after that it skips
the bitmap, and rebuilds its buckets one iteration later than usual, after the second iteration
({REDUCER}: `delay_all_reduce`, `should_rebuild_buckets`). A model whose unused parameters
change between iterations must keep `find_unused_parameters=True` instead. ddpsim reads these
iterations from torch and simulates them the same way."""),
    "buffers": Topic("Buffers follow rank 0", """
**Buffers follow rank 0.** Buffers are not gradients: BatchNorm's running statistics are updated
by each rank's own forward. With `forward_sync_buffers=True` (the default; torch 2.13 deprecates
its old name `broadcast_buffers`) DDP copies rank 0's
buffers to every rank at the start of each forward that follows a synced one (`_sync_buffers`,
the indigo bar), so every rank waits for the others before its forward starts. It moves only the
buffers' bytes (2.7 KB for the zoo's convnet), but it is a sync point every iteration; turn it
off with `forward_sync_buffers=False` where ranks may keep their own statistics (the deprecated
`broadcast_buffers=False` also skips the broadcast at construction), or use
SyncBatchNorm, which does something else: it averages statistics inside the forward."""),
    "join": Topic("Uneven inputs and Join", """
**Uneven inputs and Join.** Every DDP iteration ends in collectives that complete only when every
rank joins them. When one rank's data runs out first it leaves its loop, and the others wait for
ever in their next allreduce: the most common DDP hang (`record --uneven K` shows it, and names the
rank). `with model.join():` fixes it (torch's `Join` with DDP's `_DDPJoinHook`): the rank that ran
out *joins*, and for each iteration the others still run it shadows their collectives with zeros
(the buffer broadcast, one allreduce per bucket: `_match_all_reduce_for_bwd_pass`), so theirs
complete. Each forward starts with a tiny allreduce that counts the ranks still training;
gradients are averaged over the initial world size (`divide_by_initial_world_size=True`, the
default) or over the ranks still training. When all are out of data, every rank takes the model of
the last one to finish. `record --uneven K --join` records it, minddp mirrors it step by step
(`ddpsim/minddp/join.py`), and the simulator plays it (`simulate --uneven K --join`, `docs/join.md`)."""),
    "dataparallel": Topic("Why DDP and not DataParallel", """
**Why DDP and not DataParallel.** `nn.DataParallel` is one process driving N devices. Every
iteration it *scatters* the batch from device 0, *replicates* the module (copies every parameter
to every device and rebuilds the module tree in Python), runs the N forwards in N Python
threads (`parallel_apply`), *gathers* the outputs to device 0 for the loss, and after the
backward sums every replica's gradients onto device 0 (the backward of `Broadcast`,
`ReduceAddCoalesced`), where the optimizer alone steps. The threads share one GIL: the Python
part of each forward (module calls, argument parsing) runs one thread at a time, only the kernels
overlap. DDP runs one process per device: each has its own GIL and its own copy of the model, the
parameters never move, and the gradients are averaged by bucketed allreduces *during* the
backward (`torch/nn/parallel/data_parallel.py`, `torch/nn/parallel/comm.py`; the PyTorch DDP
design note). The figure is SIMULATED (this machine has no GPU): its pieces (forward and
backward per sample, the forward's Python share, copy and add bandwidth, the optimizer) are
measured here with real torch on one CPU thread per "device"; with *Each device* set to a GPU,
the kernels and copies come from that GPU's datasheet profile (`ddpsim/sim/hardware/gpus.json`)
instead, the kernels shrink, and the GIL-bound Python becomes most of the forward. The DDP side
is ddpsim's simulator on the same pieces. It leaves out CUDA streams' real overlap, NCCL against plain
copies (device 0 copies one device after another here), the GIL's switch interval, and device
0's extra memory (`docs/dataparallel.md`)."""),
    "no_sync": Topic("no_sync", f"""
**no_sync.** Inside `with ddp.no_sync():` (the forward must run inside too) DDP skips the
allreduce: gradients accumulate locally, and the next synced backward reduces the sum. Syncing
every *n*-th micro-step divides the communication per sample by about *n* ({PAPER}, section
3.2.4, "gradient accumulation")."""),
    "bucket_size": Topic("Choosing a bucket size", f"""
**Choosing a bucket size.** Small buckets start communicating early but pay a latency per
allreduce; large buckets pay fewer latencies but start late and leave the last one exposed.
The best size depends on the model, the number of ranks and the network, and the paper reports
that the right bucket size can make more than a 2x difference ({PAPER}, section 5.2). The
What-if page sweeps bucket sizes for your model and marks the best; its numbers are
simulated (ddpsim.sim), so treat them as a starting point to measure."""),
    "scaling": Topic("More ranks: what grows", """
**More ranks: what grows.** At a fixed batch per rank, each rank computes the same work at any
world size; what grows is the rest. The allreduce: a ring moves about the same bytes per rank at
any size but takes `2(k-1)` latency steps for `k` ranks, and NCCL estimates each algorithm and
protocol from its tuning table (`src/graph/tuning.cc` in NVIDIA's NCCL) and runs the fastest: rings
for large buckets on few nodes, trees, whose latency grows with the logarithm of the node count, at
thousands of ranks (`ddpsim/sim/nccl.py`). Beyond one node the node's GPUs share its network cards,
so leaving one node is a step of its own (ResNet-50 on V100s over 25 GbE, SIMULATED: 124.0 ms per
iteration at 8 ranks, 130.9 ms at 16). And every allreduce waits for the slowest
rank: with ranks that vary by a fraction sigma from step to step, the slowest of `n` is about
`sigma·sqrt(2 ln n)` behind the typical one, a wait that grows slowly and never stops growing (Note
[Waiting for the slowest rank] in `ddpsim/sim/stragglers.py`). The What-if page's scaling curve
splits each simulated iteration into compute, exposed communication and that wait, from 1 to
100,000 ranks; its numbers are SIMULATED."""),
    "cpu": Topic("Why the real runs here barely change", CPU_NOTE + " (measured on the 2-core machine "
                 "the bundled samples were recorded on; the numbers are in `docs/accuracy.md`)."),
    "simulated": Topic("Simulated runs", """
**Simulated runs** come from ddpsim.sim, a discrete-event model of DDP with torch 2.13's rules
(bucket layouts, launch order, the rebuild, find_unused_parameters, no_sync). A simulation
*calibrated from a real trace* reuses that trace's measured per-gradient compute times and a
fitted allreduce cost; a *GPU* simulation uses published layer sizes (ResNet-50, BERT-large,
GPT-2) and datasheet GPU and network figures. They are labelled SIMULATED everywhere."""),
}

ORDER = ("reverse", "buckets", "order", "rebuild", "overlap", "find_unused", "static_graph", "buffers", "join",
         "no_sync", "bucket_size", "scaling", "dataparallel", "cpu", "simulated")


# One figure per topic, drawn by ddpsim.viz from a bundled sample: (sample, view, iteration or
# runs, caption). view: "buckets", "timeline" (an iteration; None: the median steady one),
# "compare" (several samples, their median steady iterations).
FIGURES = {
    "reverse": ("06_transformer_torch_default", "buckets", None,
                "A real 2-rank run: gradients arrive in the reverse of definition order (left); "
                "the buckets are built from that order (right)."),
    "buckets": ("24_sim_bert-large_a100-eth100_w64_default", "buckets", None,
                "SIMULATED BERT-large, 64 ranks: 25 MiB buckets, the first one 1 MiB."),
    "rebuild": ("20_sim_resnet50_v100-eth25_w64_default", "timeline", 0,
                "SIMULATED ResNet-50, iteration 0: one bucket, reduced after the whole backward."),
    "overlap": ("20_sim_resnet50_v100-eth25_w64_default", "timeline", None,
                "The same run after the rebuild: allreduces run while backward computes; the "
                "hatched part is what is left exposed."),
    "find_unused": ("04_branchy_torch_find_unused", "timeline", None,
                    "A real run with find_unused_parameters=True: the graph search after forward "
                    "(dashed box) and the bitmap allreduce after the last bucket."),
    "buffers": ("05_convnet_torch_no_sync3", "timeline", 0,
                "A real convnet run (BatchNorm): the forward starts with the broadcast of rank 0's "
                "buffers (indigo), which each rank waits in until all have joined."),
    "join": ({"arch": "resnet50", "world_size": 4, "iters": 6, "uneven": 1, "join": True}, "simulated", 5,
             "SIMULATED ResNet-50 on 4 A100s, rank r with r fewer batches, inside model.join(): at step 5 "
             "ranks 1-3 are out of data and shadow rank 0's allreduces with zeros."),
    "no_sync": ("05_convnet_torch_no_sync3", "timeline", 1,
                "A real run syncing every 3rd micro-step: this step has no allreduce."),
    "bucket_size": (("20_sim_resnet50_v100-eth25_w64_default", "22_sim_resnet50_v100-eth25_w64_cap100"),
                    "compare", None,
                    "SIMULATED ResNet-50 on 64 V100s and 25 GbE: torch's default buckets against one "
                    "100 MiB bucket that starts only after backward (the What-if sweep tries more sizes)."),
}


def figure(name: str):
    """The figure of topic ``name`` (a matplotlib Figure), or None when it has none.

    Always the bundled samples (whatever DDPSIM_SAMPLES_DIR says): the texts describe them.
    """
    from ddpsim.samples import BUNDLED_DIR  # noqa: PLC0415 (keep this module importable cheaply)
    from ddpsim.trace import load_trace  # noqa: PLC0415
    from ddpsim.viz import typical_iteration, plot_buckets, plot_compare, plot_timeline  # noqa: PLC0415

    if name not in FIGURES:
        return None

    def sample_path(stem):
        return BUNDLED_DIR / f"{stem}.json"

    sample, view, iteration, _ = FIGURES[name]
    if view == "simulated":  # a small simulation drawn live (SimConfig fields; no sample holds it)
        from ddpsim.sim import SimConfig, simulate  # noqa: PLC0415
        from ddpsim.sim.archs import synthetic  # noqa: PLC0415

        spec = dict(sample)
        return plot_timeline(simulate(synthetic(spec.pop("arch")), SimConfig(**spec))[0], iteration)
    if view == "compare":
        return plot_compare([(s.split("_w64_")[-1], load_trace(sample_path(s))) for s in sample])
    trace = load_trace(sample_path(sample))
    if view == "buckets":
        return plot_buckets(trace)
    return plot_timeline(trace, typical_iteration(trace) if iteration is None else iteration)


DATAPARALLEL_MODELS = ("convnet", "mlp", "transformer")  # zoo models the DataParallel section offers
# what a simulated device is -> the GPU profile (ddpsim/sim/hardware/gpus.json), None: as measured here
DATAPARALLEL_DEVICES = {"this machine's CPU (measured)": None, "V100 (profile)": "v100",
                        "A100 (profile)": "a100", "H100 (profile)": "h100"}


def dataparallel(model: str, n_devices: int, gpu: str | None = None):
    """DataParallel beside DDP for zoo ``model`` on ``n_devices`` devices: SIMULATED from pieces
    measured here (``ddpsim.experiments.dp_pieces``; the measurement is cached per model), with a
    GPU profile's kernels and copies when ``gpu`` names one."""
    from ddpsim.experiments.dp_pieces import dataparallel as compare  # noqa: PLC0415 (torch on demand)

    return compare(model, n_devices, gpu=gpu)


def dataparallel_figure(comparison):
    """The DataParallel section's figure of ``comparison`` (``dataparallel(...)``'s result)."""
    from ddpsim.viz.dataparallel import plot_dataparallel  # noqa: PLC0415

    return plot_dataparallel(comparison)


def dataparallel_caption(c) -> str:
    """One line under the figure: the numbers it shows, and that they are simulated."""
    return (f"{c.label}: {c.costs.model}, batch {c.costs.batch} over {c.n_devices} devices. DataParallel "
            f"{c.dp.iteration_s * 1e3:.2f} ms per iteration, DDP {c.ddp.iteration_s * 1e3:.2f} ms: DDP at "
            f"{c.speedup:.2f}x the speed. Pieces: {c.costs.source}. The iterations are simulated.")
