"""Write notebooks/*.ipynb from the cell lists below, and run them so they open with outputs.

    python notebooks/build_notebooks.py --execute    # what is committed: built and run
    python notebooks/build_notebooks.py              # sources only (no outputs), fast

Edit the cells here, not in Jupyter, then rebuild with --execute: the .ipynb files in
git are generated, and carry the outputs of one run on a 2-core CPU so that a student
sees every figure before running anything. ``tests/test_notebooks.py`` checks the
sources match and executes every notebook again.
"""
from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent


def setup(tag: str) -> str:
    """The first code cell of every notebook: find the repo, a temp folder, one thread."""
    return f'''# Setup: make `import ddpsim` work from notebooks/ or the repo root; files go to a temp folder.
import sys, tempfile, time
from pathlib import Path
ROOT = next((p for p in [Path.cwd(), *Path.cwd().parents] if (p / "ddpsim").is_dir()), None)
if ROOT is not None:  # a checkout: its ddpsim; elsewhere the installed one (pip install ddpsim)
    sys.path.insert(0, str(ROOT))
WORK = Path(tempfile.mkdtemp(prefix="ddpsim-{tag}-"))
import torch
torch.set_num_threads(1)
import ddpsim
from IPython.display import display
%matplotlib inline
print("ddpsim", ddpsim.__version__, "| torch", torch.__version__, "| scratch folder", WORK)'''


CLEANUP = '''# Clean up the scratch folder (every recorded rank process has already exited).
import shutil
shutil.rmtree(WORK, ignore_errors=True)'''

M, C = new_markdown_cell, new_code_cell

# --------------------------------------------------------------------------------------------
NB01 = [
    M("""# 01 · DDP from the outside

**What you will learn:** what PyTorch `DistributedDataParallel` does during one training step,
seen from outside: in which order gradients become ready, how DDP groups them into buckets,
why iteration 0 has one single bucket and how the buckets are *rebuilt* after it, and when each
bucket's allreduce runs compared with the backward pass; and why DDP replaced `nn.DataParallel`
(a simulated DataParallel iteration beside DDP's).

**Time:** about 1 minute to run (one real 2-process run on CPU), 20 minutes to read.

**You need:** the set-up from the README. Run the cells top to bottom."""),
    C(setup("nb01")),
    M("""## 1. Record a real run

`ddpsim.record` starts 2 real processes (ranks) that train the zoo `mlp` with torch's own DDP over
gloo, and records every event into one **trace**. The same happens on the command line with
`python -m ddpsim record --model mlp --world-size 2 --iters 4 --out run.json`."""),
    C('''from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record

t = time.time()
trace = record(RecordConfig(model="mlp", world_size=2, iters=4), WORK / "mlp.json")
print(f"recorded {len(trace.ranks)} ranks x {len(trace.ranks[0].iterations)} iterations in {time.time() - t:.1f} s")
print("torch", trace.meta["torch_version"], "| backend", trace.meta["backend"])'''),
    M("""## 2. The parameters DDP sees

DDP reduces every parameter that requires a gradient, each once, indexed in definition order.
The `mlp` has one frozen parameter: it has no DDP index."""),
    C('''for p in trace.params:
    print(f"{str(p.index):>4}  {p.name:<22} {str(p.shape):<14} {p.bytes / 2**20:7.3f} MiB  requires_grad={p.requires_grad}")'''),
    M("""## 3. Gradient-ready order

Backward runs from the loss back to the input, so the *last* layer's gradients are ready first.
Inside a `Linear`, the bias is ready before the weight."""),
    C('''from ddpsim.analysis import grad_ready_order

order = grad_ready_order(trace, rank=0, iteration=0)
print("ready order (indices):", order)
print("ready order (names):  ", [trace.param_name(i) for i in order][:4], "...")
assert order[0] > order[-1], "the last-defined parameters are ready first"'''),
    M("""## 4. Iteration 0: one single bucket, then the rebuild

In torch 2.13, with `find_unused_parameters=False` (the default), DDP starts with **all parameters
in one bucket**: iteration 0 does one allreduce after the whole backward. While iteration 0 runs,
DDP records the order gradients arrive in; at the next forward it *rebuilds* the buckets in that
order (`Reducer::rebuild_buckets`): with `bucket_cap_mb` left at its default (None, as here) the
first bucket gets a small 1 MiB cap and the others 25 MiB (an explicit `bucket_cap_mb`, even 25,
caps the first bucket the same as the rest), a bucket closes once it reaches its cap (it may
overshoot by one parameter, a parameter is never split), and rank 0's layout is broadcast to
every rank."""),
    C('''rank0 = trace.ranks[0]
for layout in rank0.layouts:
    print(f"from iteration {layout.from_iteration}: {layout.kind} layout, {len(layout.buckets)} bucket(s)")
    for b in layout.buckets:
        cap = "" if b.cap_bytes is None or b.cap_bytes > 2**40 else f" (cap {b.cap_bytes / 2**20:g} MiB)"
        print(f"   bucket {b.index}: {b.bytes / 2**20:6.2f} MiB{cap}  params {b.params}")
assert len(rank0.layout_at(0).buckets) == 1
assert rank0.layout_at(1).kind == "rebuilt" and len(rank0.layout_at(1).buckets) > 1'''),
    M("""torch keeps its own record of this in `_get_ddp_logging_data()` (the recorder saves it at the end):"""),
    C('''info = rank0.ddp_logging_data or {}
for key in ("bucket_sizes", "rebuilt_bucket_sizes", "rebuilt_per_bucket_param_indices",
            "prev_iteration_grad_ready_order_indices"):
    print(f"{key:42} {info.get(key)}")'''),
    M("""## 5. The allreduce spans

For every bucket and iteration the trace holds when the bucket became **ready** (its last
gradient arrived), when its allreduce was **launched**, and when it **completed**. In iteration 0
the single allreduce starts only after backward; from iteration 1 the first bucket's allreduce
overlaps with the rest of the backward."""),
    C('''from ddpsim.analysis import bucket_table

for it in (0, 1):
    print(f"iteration {it}:")
    for row in bucket_table(trace, it):
        print(f"   bucket {row['bucket']}: {row['bytes'] / 2**20:6.2f} MiB, waited {row['wait_s'] * 1e3:5.2f} ms "
              f"after ready, allreduce {row['comm_s'] * 1e3:6.2f} ms")'''),
    C('''from ddpsim.viz import plot_timeline

plot_timeline(trace, 0)'''),
    C('''plot_timeline(trace, 1)'''),
    M("""## 6. The headline numbers

`summarize(trace)` gives medians over the steady-state iterations: iteration time, *exposed*
communication (allreduce time after backward compute ended, which the step has to wait for) and
the overlap fraction. On this 2-core machine, compute and communication compete for the same
cores, so overlap helps less than on GPUs (see notebook 03)."""),
    C('''from ddpsim.analysis import summarize

s = summarize(trace)
print(f"iteration {s['iteration_time_s'] * 1e3:.1f} ms, exposed comm {s['exposed_comm_s'] * 1e3:.1f} ms, "
      f"overlap {s['overlap_fraction']:.0%}")'''),
    M("""## 7. Why DDP and not DataParallel

Before DDP there was `nn.DataParallel`: **one process** drives N devices. Every iteration it
*scatters* the batch from device 0, *replicates* the module (copies every parameter to every
device and rebuilds the module tree in Python), runs the N forwards in **N Python threads**
(`parallel_apply`), *gathers* the outputs to device 0 for the loss, and after the backward **sums
every replica's gradients onto device 0** (`Broadcast`'s backward, `ReduceAddCoalesced`), where
the optimizer alone steps (`torch/nn/parallel/data_parallel.py`, `comm.py`). The threads share one
GIL: the Python of each forward runs one thread at a time; only the kernels overlap. DDP instead
runs one process per device with its own GIL, never moves the parameters, and averages the
gradients with the bucketed allreduces you just saw, during the backward.

This machine has no GPU, so both iterations are **SIMULATED** from pieces measured here with real
torch on one thread: the zoo `convnet`'s forward and backward per sample, the Python share of its
forward (what holds the GIL), a real tensor copy and add, the optimizer step. The DDP side is
ddpsim's simulator on the same pieces and the same copy bandwidth."""),
    C('''from ddpsim.experiments.dp_pieces import measure_pieces

pieces = measure_pieces("convnet", 32)
print(pieces.source)
for name, value in [("forward, fixed", pieces.forward_fixed_s), ("forward per sample", pieces.forward_per_sample_s),
                    ("Python share of a forward (holds the GIL)", pieces.python_s),
                    ("backward, fixed", pieces.backward_fixed_s), ("backward per sample", pieces.backward_per_sample_s),
                    ("optimizer step", pieces.optimizer_s), ("rebuild one replica's modules", pieces.replicate_python_s)]:
    print(f"{name:42} {value * 1e3:8.3f} ms")
print(f"{'copy bandwidth':42} {pieces.copy_Bps / 1e9:8.1f} GB/s, parameters {pieces.param_bytes / 1e6:.2f} MB, "
      f"{pieces.module_calls} module calls per forward")'''),
    C('''from ddpsim.sim.dp_compare import compare
from ddpsim.viz.dataparallel import plot_dataparallel

result = compare(pieces, 4)
print(f"{result.label}, 4 devices: DataParallel {result.dp.iteration_s * 1e3:.2f} ms, "
      f"DDP {result.ddp.iteration_s * 1e3:.2f} ms per iteration: DDP at {result.speedup:.2f}x the speed")
for n, dp, ddp in result.scaling:
    print(f"   {n} devices: DataParallel {dp * 1e3:6.2f} ms   DDP {ddp * 1e3:6.2f} ms")
plot_dataparallel(result)'''),
    M("""Read the figure row by row: DataParallel's devices wait for their chunk and their copy of the
parameters, then take turns holding the GIL (pink) between their kernels (light grey), so the
forward stretches; after the backward, every device's gradients travel to device 0 one after
another, and only device 0 steps. DDP's ranks just compute, then allreduce (green): this small
model's gradients fit one bucket, so its one allreduce starts as the backward ends (notebook 03
shows buckets overlapping a backward). With more devices DataParallel's copies and reduction grow while each device's compute
shrinks, so past a few devices it gets *slower*.

On a GPU the kernels are far shorter than this CPU's, and the Python is not. `on_gpu` keeps the
Python share measured here (a GPU machine's host runs the same Python) and takes the kernels
(FLOPs counted by torch, at the GPU's effective rate) and the NVLink copies from a datasheet
profile in `ddpsim/sim/hardware/gpus.json`: still SIMULATED, and cruder."""),
    C('''from ddpsim.sim.dataparallel import on_gpu

gpu = compare(on_gpu(pieces, "h100"), 4)
print(f"{gpu.label}, {gpu.costs.device}:")
for n, dp, ddp in gpu.scaling:
    print(f"   {n} devices: DataParallel {dp * 1e3:5.2f} ms   DDP {ddp * 1e3:5.2f} ms   ({dp / ddp:4.2f}x the speed)")'''),
    M("""Here the zoo `convnet` is so small that even DDP's ranks are bound by their Python and get no
faster past one device, but DataParallel's threads queue for the one GIL, so it gets slower with
every device you add.

What this leaves out (`docs/dataparallel.md`): CUDA streams' real overlap of copies and kernels,
NCCL's pipelined broadcast and reduce (here device 0 copies one device after another, as without
NCCL), the GIL's 5 ms switch interval, kernel-launch latency on a GPU, and device 0's extra memory
for the gathered outputs and the summed gradients."""),
    M("""## Try it yourself
- Record with `bucket_cap_mb=0.25`: how many buckets after the rebuild? Is there still one bucket in iteration 0?
- Record the `transformer` (its output head is tied to the embedding: where does that parameter land?).
- Export the trace for Perfetto: `python -m ddpsim export --chrome mlp.json mlp.chrome.json`.
- DataParallel beside DDP for the `mlp`, 12.6 MB of parameters to copy every iteration:
  `compare(measure_pieces("mlp"), 4)`. Where does DataParallel stop getting faster?

Next: **02 · Inside the reducer**, the same steps in readable Python."""),
    C(CLEANUP),
]

# --------------------------------------------------------------------------------------------
NB02 = [
    M("""# 02 · Inside the reducer

**What you will learn:** how DDP's C++ `Reducer` works, step by step, using `ddpsim.minddp`, a
readable Python DDP whose methods carry the names of the functions in
`torch/csrc/distributed/c10d/reducer.cpp`: bucket assignment by size (the cap overshoot and the
never-split rule), the hooks that fire as gradients arrive, the strictly in-order launch of
allreduces, and `finalize_backward`. Then the naive per-parameter variant, for contrast, and the
ladder from naive data parallelism to torch's DDP, recorded side by side.

**Time:** about 1 minute to run, 30 minutes to read. Builds on notebook 01.

Most of this notebook runs in *this* process, as a one-rank process group, so you can poke at
the reducer's state between steps. The last section records real 2-rank runs."""),
    C(setup("nb02")),
    C('''import torch.distributed as dist
from torch import nn

if not dist.is_initialized():  # a 1-rank gloo group in this kernel
    dist.init_process_group("gloo", init_method=f"file://{WORK / 'store'}", rank=0, world_size=1)
torch.manual_seed(0)
tiny = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
for name, p in tiny.named_parameters():
    print(f"{name:10} {str(list(p.shape)):10} {p.numel() * p.element_size():5d} bytes")'''),
    M("""## 1. Bucket assignment by size — `compute_bucket_assignment_by_size`

Parameters are added in the order given. A bucket **closes as soon as its size is >= the cap
after adding a parameter**: so a bucket can overshoot the cap by one parameter, and a parameter
is never split. Buckets are kept separately per dtype and device.

With a 600-byte cap: 512 + 64 = 576 bytes is still under the cap, adding the 1024-byte weight
makes 1600 bytes: the bucket closes there, 1000 bytes over the cap."""),
    C('''from ddpsim.minddp import compute_bucket_assignment_by_size

params = list(tiny.parameters())
ours = compute_bucket_assignment_by_size(params, [600])
from ddpsim import torchcompat  # the one place ddpsim calls torch's private functions

theirs = torchcompat.compute_bucket_assignment_by_size(params, [600])  # torch's C++ implementation
print("minddp:", ours)
print("torch: ", theirs)
assert ours == tuple(theirs) or list(ours) == list(theirs)
sizes = [p.numel() * p.element_size() for p in params]
for bucket in ours[0]:
    print(f"bucket {bucket}: {sum(sizes[i] for i in bucket)} bytes (cap 600)")'''),
    M("""Two caps: the first bucket gets the first limit, later ones the last. This is how the small
1 MiB first bucket is made. (Try `[100, 600]` and `[10_000]`.)"""),
    C('''print(compute_bucket_assignment_by_size(params, [100, 600]))
print(torchcompat.compute_bucket_assignment_by_size(params, [100, 600]))'''),
    M("""## 2. Watch the reducer work

We wrap the tiny model in `minddp.DistributedDataParallel` with a 600-byte cap and log every call
to the reducer methods that mirror reducer.cpp:

| minddp `Reducer` method | reducer.cpp | when |
|---|---|---|
| `prepare_for_forward` | `Reducer::prepare_for_forward` | each forward starts |
| `rebuild_buckets` | `Reducer::rebuild_buckets` | next forward after iteration 0 |
| `prepare_for_backward` | `Reducer::prepare_for_backward` | forward ends |
| `autograd_hook` | `Reducer::autograd_hook` | a parameter's AccumulateGrad ran |
| `mark_variable_ready` | `Reducer::mark_variable_ready` | copy grad / world size into its bucket |
| `mark_bucket_ready` | `Reducer::mark_bucket_ready` | a bucket is full |
| `all_reduce_bucket` | `Reducer::all_reduce_bucket` | launch, strictly in bucket order |
| `finalize_backward` | `Reducer::finalize_backward` | after backward: wait, copy to `.grad` |"""),
    C('''from ddpsim.minddp import DistributedDataParallel as MinDDP

CAP_MB = 600 / 2**20
ddp = MinDDP(tiny, bucket_cap_mb=CAP_MB)
reducer = ddp.reducer
LOG = []

def watch(name, describe=lambda *a: ""):
    method = getattr(reducer, name)
    def wrapper(*args, **kwargs):
        LOG.append(f"{name}({describe(*args)})")
        return method(*args, **kwargs)
    setattr(reducer, name, wrapper)

for name in ("prepare_for_forward", "rebuild_buckets", "prepare_for_backward", "finalize_backward"):
    watch(name)
watch("autograd_hook", lambda i, *a: f"param {i}")
watch("mark_bucket_ready", lambda b: f"bucket {b}")
watch("all_reduce_bucket", lambda b: f"bucket {b.index}: params {b.variable_indices}")

def step(iteration, features=8):
    LOG.clear()
    g = torch.Generator().manual_seed(iteration)
    x, y = torch.randn(4, features, generator=g), torch.randint(0, 4, (4,), generator=g)
    nn.functional.cross_entropy(ddp(x), y).backward()
    print(f"--- iteration {iteration}: {len(reducer.buckets)} bucket(s)")
    print("\\n".join(LOG))

print("construction layout:", [b.variable_indices for b in reducer.buckets])'''),
    M("""**Iteration 0.** One bucket holds everything (`find_unused_parameters=False`), so the hooks
fire one by one, the bucket is ready only after the last one, and its single allreduce starts
after backward. Note the hook order: the last layer first, bias before weight."""),
    C('''step(0)
assert len(reducer.buckets) == 1'''),
    M("""**Iteration 1.** At the next forward `rebuild_buckets` reassigns the buckets in the order the
gradients arrived (600-byte cap). Now a bucket launches as soon as it is full, while the hooks of
earlier layers are still to come: **overlap**."""),
    C('''step(1)
print("rebuilt layout:", [b.variable_indices for b in reducer.buckets])
assert len(reducer.buckets) > 1
first_launch = next(i for i, line in enumerate(LOG) if line.startswith("all_reduce_bucket"))
last_hook = max(i for i, line in enumerate(LOG) if line.startswith("autograd_hook"))
assert first_launch < last_hook, "bucket 0 launched before the last gradient arrived"'''),
    M("""Every averaged gradient is back in `.grad` after `finalize_backward` (with one rank, the average is the gradient itself):"""),
    C('''print({name: tuple(p.grad.shape) for name, p in tiny.named_parameters()})'''),
    M("""## 3. In-order launch

Gradients can arrive in a different order on different ranks, but every rank must issue the same
collectives in the same order, or they would pair up wrongly. So `mark_bucket_ready` launches
**only in bucket-index order**: a ready bucket waits for every lower-indexed one.

To see a bucket wait, build a model whose layers are *defined* in a different order from the one
they are *used* in, and keep the construction layout (reversed definition order), as
`find_unused_parameters=True` does (it never rebuilds)."""),
    C('''class Shuffled(nn.Module):  # three equal layers: 1024 + 64 bytes each
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)  # used last, so its gradients are ready first
        self.c = nn.Linear(16, 16)  # used second, defined last
    def forward(self, x):
        return self.b(torch.relu(self.c(torch.relu(self.a(x)))))

torch.manual_seed(0)
ddp = MinDDP(Shuffled(), bucket_cap_mb=1050 / 2**20, find_unused_parameters=True)  # one layer per bucket
reducer = ddp.reducer
LOG = []
for name in ("finalize_backward",):
    watch(name)
watch("autograd_hook", lambda i, *a: f"param {i}")
watch("mark_bucket_ready", lambda b: f"bucket {b}")
watch("all_reduce_bucket", lambda b: f"bucket {b.index}: params {b.variable_indices}")
print("layout (reversed definition order):", [b.variable_indices for b in reducer.buckets])
step(0, features=16)'''),
    M("""Layer `b`'s gradients arrive first and fill bucket 1, but `mark_bucket_ready(bucket 1)` launches
nothing: bucket 0 (layer `c`) is not ready yet. Once it is, both launch back to back. That waiting is what a bad bucket
order costs; notebook 03 measures it."""),
    C('''import warnings
warnings.filterwarnings("ignore")
launches = [line for line in LOG if line.startswith("all_reduce_bucket")]
assert LOG.index("mark_bucket_ready(bucket 1)") < LOG.index(launches[0]), "bucket 1 was full first and waited"
assert [int(line.split()[1].rstrip(":")) for line in launches] == sorted(range(len(launches)))
print(launches)'''),
    M("""## 4. The naive variant, for contrast

`NaiveDDP` waits for the whole backward, then allreduces **every parameter separately**, blocking
on each: no buckets, no overlap, one collective (and its latency) per parameter."""),
    C('''from ddpsim.minddp import NaiveDDP

calls = []
real_all_reduce = dist.all_reduce
def counting_all_reduce(tensor, *args, **kwargs):
    calls.append(tensor.numel())
    return real_all_reduce(tensor, *args, **kwargs)

torch.manual_seed(0)
naive = NaiveDDP(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)))
dist.all_reduce = counting_all_reduce
try:
    nn.functional.cross_entropy(naive(torch.randn(4, 8)), torch.randint(0, 4, (4,))).backward()
finally:
    dist.all_reduce = real_all_reduce
print(f"naive: {len(calls)} allreduces of {calls} elements")
dist.destroy_process_group()'''),
    M("""The same contrast on 2 real ranks, recorded with `--impl minddp` and `--impl naive` (the zoo
`mlp`, 3 iterations each): compare the timelines of iteration 2."""),
    C('''from ddpsim.analysis import summarize
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record
from ddpsim.viz import plot_timeline

runs = {impl: record(RecordConfig(model="mlp", world_size=2, iters=3, impl=impl, bucket_cap_mb=2),
                     WORK / f"{impl}.json") for impl in ("minddp", "naive")}
for impl, tr in runs.items():
    s = summarize(tr)
    n = len(tr.ranks[0].iterations[-1].buckets)
    print(f"{impl:7} {n:3d} allreduces per step, iteration {s['iteration_time_s'] * 1e3:6.1f} ms, "
          f"exposed comm {s['exposed_comm_s'] * 1e3:6.1f} ms")'''),
    C('''plot_timeline(runs["minddp"], 2)'''),
    C('''plot_timeline(runs["naive"], 2)'''),
    M("""## 5. The ladder: naive → overlap → bucketed → torch's DDP

Each rung adds one idea of DDP, and each has an implementation you can read and record:

| rung | implementation | what it adds |
|---|---|---|
| naive | `NaiveDDP` (`--impl naive`) | allreduce every gradient, one after another, after backward |
| overlap | `OverlapDDP` (`--impl overlap`) | launch each gradient's allreduce from its hook, while backward still runs |
| bucketed | minddp, fixed buckets (`--impl minddp --order reverse`) | pack gradients into capped buckets, launched in order |
| torch | torch's `DistributedDataParallel` | one bucket in iteration 0, then buckets rebuilt in gradient-ready order with a small first bucket |

`ddpsim.experiments.ladder.record_ladder` records the four rungs **in the same two processes, taking turns
iteration by iteration**, so a slow spell of this shared machine hits every rung alike (the same
as `python -m ddpsim ladder`). The table gives each rung's median iteration time and exposed
communication with the interquartile range (IQR) over the steady iterations, measured and
simulated. *replayed*: each rung simulated from its own recording. *predicted*: all four rungs from
the torch rung's recording alone (`learn_from="torch"`): a fair test, since the simulator never saw
the other three runs."""),
    C('''from ddpsim.experiments.ladder import format_table, ladder_table, record_ladder, simulate_rungs
from ddpsim.viz import plot_ladder

measured = record_ladder("mlp", world_size=2, iters=10, out_dir=WORK / "ladder")
rows = ladder_table(measured, replayed=simulate_rungs(measured, iters=16, learn_from="own"),
                    predicted=simulate_rungs(measured, iters=16, learn_from="torch"))
print(format_table(rows))'''),
    C('''plot_ladder(rows)'''),
    M("""What to look for (on this 2-core CPU the rungs are close and noisy; on GPUs, where compute and
communication do not share cores, the steps are larger):
- **naive → overlap**: the exposed communication shrinks, because most allreduces now run during
  backward. But every parameter still pays a collective's fixed latency.
- **overlap → bucketed**: fewer, larger allreduces. With buckets reduced in a *fixed* order
  (`reverse`: the guess that gradients arrive in reverse definition order) a bucket waits for
  its last gradient, so here the big bucket overlaps little.
- **bucketed → torch**: the rebuild puts parameters into buckets in the order their gradients
  *really* arrived, and the small first bucket starts communication early.
- **predicted vs measured**: the prediction learns each launch's cost and each collective's share
  of the CPU core from the torch rung's two large buckets, far from ten small per-parameter
  collectives: compare the overlap rung's predicted row with its measured one in the table (on this
  machine how far apart they land depends on its load). A model is only as good as the runs it has seen: that is why
  `validate --grid` checks predictions on runs it was not fitted to."""),
    M("""## Try it yourself
- Change the cap in section 1 until one parameter is larger than the cap. What happens?
- In section 2, use `bucket_cap_mb=None` (torch's default): why is there one bucket after the rebuild too?
- In section 5, pass `bucket_cap_mb=1` to `record_ladder`: which rungs change, and why?
- Read `ddpsim/minddp/overlap.py`: why must every rank launch the same allreduces in the same order?
- Read `ddpsim/minddp/reducer.py` next to reducer.cpp; then do **assignment part 1 and part 2**.

Next: **03 · Bucket size and ordering**."""),
    C(CLEANUP),
]

# --------------------------------------------------------------------------------------------
NB03 = [
    M("""# 03 · Bucket size and ordering

**What you will learn:** how to time this machine's network (allreduce time against message
size) inside a real run, learn ddpsim's simulator from that run the way `validate` and the
What-if page do, sweep the bucket size and find the sweet spot, see what a bad bucket order
costs (the `shuffled` model before a rebuild), and check one prediction against real runs
recorded together.

**Time:** about 1 minute to run (2 real recordings), 25 minutes to read.
Builds on notebooks 01 and 02."""),
    C(setup("nb03")),
    M("""## 1. Record a run and time its network

We record the zoo `transformer` on 2 ranks at torch's default cap. Between iterations its ranks
also time one allreduce of each of several sizes (`probe_allreduce_bytes`, what
`validate --grid` does), and `fit_calibration` fits a line through them: `time = a + b * bytes`.
The intercept is the latency every collective pays; the slope is one over the bandwidth. Small
buckets pay the latency many times; large buckets pay mostly bandwidth. (`python -m ddpsim
calibrate` times the same in processes of its own; timed in the run's own ranks, the line is
measured at the same moments as the run: Note [Calibrate in the recording's ranks] in
`ddpsim/experiments/grid.py`.)"""),
    C('''from ddpsim.analysis import summarize
from ddpsim.experiments.calibrate import fit_calibration
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record

SIZES = [4 * 1024, 64 * 1024, 512 * 1024, 2 * 2**20, 8 * 2**20]
t = time.time()
base = record(RecordConfig(model="transformer", world_size=2, iters=20, probe_allreduce_bytes=SIZES),
              WORK / "transformer.json")
cal = fit_calibration(base.meta["allreduce_probe"], world=2)
base.meta["calibration"] = cal  # what `python -m ddpsim calibrate --trace` stores: ddpsim.learn uses it
measured = summarize(base)["iteration_time_s"]
print(f"recorded in {time.time() - t:.1f} s: {measured * 1e3:.1f} ms per iteration at torch's default cap")
for n, sec in cal["points"]:
    print(f"{n / 1024:8.0f} KiB  {sec * 1e3:8.3f} ms")
print(f"fit: latency {cal['intercept_s'] * 1e3:.3f} ms + {1 / cal['s_per_byte'] / 1e9:.2f} GB/s")'''),
    C('''from matplotlib.figure import Figure

fig = Figure(figsize=(6, 3.5), layout="constrained")
ax = fig.subplots()
xs = [n / 2**20 for n, _ in cal["points"]]
ax.plot(xs, [s * 1e3 for _, s in cal["points"]], "o", label="measured")
ax.plot(xs, [(cal["intercept_s"] + cal["s_per_byte"] * n) * 1e3 for n, _ in cal["points"]], "-", label="fit")
ax.set(xscale="log", yscale="log", xlabel="allreduce size (MiB)", ylabel="time (ms)",
       title="2-rank gloo allreduce on this machine")
ax.legend()
fig'''),
    M("""## 2. Sweep the bucket size with the simulator

`ddpsim.learn.learn(trace)` is what `python -m ddpsim validate`, `sweep --trace` and the What-if
page learn from a recording: each gradient's backward compute time, calibrated against the run's
own phases, and the network line just measured. `sweep(w, grid, trace=base)` then replays the
recorded run (its 2 ranks, iteration by iteration) with each cap in place of the default; each
configuration takes a fraction of a second. First the run itself: its replay should give back
the measured time."""),
    C('''from ddpsim.learn import learn, replay_config, simulate, sweep
from ddpsim.sim import SimConfig, synthetic
from ddpsim.viz import plot_sweep

w = learn(base)
print(f"learnt link: {w.link.name}: latency {w.link.alpha_s * 1e3:.2f} ms per ring step, "
      f"{w.link.bandwidth_Bps / 1e9:.2f} GB/s")
_, replay = simulate(w, replay_config(w, base))
print(f"the recorded run (default cap): measured {measured * 1e3:.1f} ms, replayed "
      f"{replay['iteration_time_s'] * 1e3:.1f} ms ({replay['iteration_time_s'] / measured - 1:+.1%})")
CAPS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 25]
rows = sweep(w, {"bucket_cap_mb": CAPS}, trace=base)
best = min(rows, key=lambda r: r["iteration_time_s"])
for r in rows:
    print(f"{r['bucket_cap_mb']:6} MiB: {r['n_buckets']:2d} buckets, {r['iteration_time_s'] * 1e3:7.1f} ms "
          f"({r['iteration_time_s'] / best['iteration_time_s'] - 1:+5.1%})" + ("   <- best" if r is best else ""))'''),
    C('''plot_sweep(rows, title="zoo transformer, 2 ranks, this machine (simulated)")'''),
    M("""On this machine small buckets cost more: each allreduce pays the latency measured above (a
couple of milliseconds here, against a backward of a few tens), and overlapping them with the
backward gains little, because gloo's threads share each rank's core with autograd (the
simulator knows this from the recording). From about 1 MiB up there are one or two buckets,
and the simulator puts those caps within a percent or so of each other. The latency is what
the sweep needs: without `meta.calibration`, the line is fitted through the run's own
collectives, and through the default cap's two bucket sizes it has no latency (Note [One
bucket size and the latency probe] in `ddpsim/learn/linkfit.py`); the sweep then comes out
nearly flat, and says nothing about small buckets.

Bucket size matters more when communication can run *beside* compute, as on GPUs with their
own network engines. A what-if where it does: ResNet-50 on 64 V100 GPUs joined by 10 Gb
Ethernet (a synthetic workload from the architecture's parameter table, see notebook 05). Tiny
buckets pay the per-collective latency dozens of times (46 buckets at 0.25 MiB); one huge bucket
starts only after the whole backward and overlaps nothing. The sweet spot is in between."""),
    C('''resnet = synthetic("resnet50", "v100-eth10")
big = sweep(resnet, {"bucket_cap_mb": [0.25, 1, 4, 10, 25, 50, 100, 200]}, SimConfig(world_size=64, iters=3))
sweet = min(big, key=lambda r: r["iteration_time_s"])
for r in big:
    print(f"{r['bucket_cap_mb']:6} MiB: {r['n_buckets']:3d} buckets, {r['iteration_time_s'] * 1e3:7.1f} ms"
          + ("   <- sweet spot" if r is sweet else ""))
times = [r["iteration_time_s"] for r in big]
print(f"worst / best = {max(times) / min(times):.2f}x")'''),
    C('''plot_sweep(big, title="ResNet-50, 64 V100s, 10 GbE (simulated)")'''),
    M("""## 3. What a bad order costs

Buckets launch strictly in index order (notebook 02). The construction layout *guesses* that
gradients arrive in reverse definition order; the `shuffled` model defines its layers out of
forward order, so the guess is wrong and ready buckets wait. torch fixes this with the rebuild
after iteration 0, but with `find_unused_parameters=True` it never rebuilds. The simulator's
`order` option compares the two layouts on the same workload, learnt from a bundled `shuffled`
recording and replayed with each order."""),
    C('''from ddpsim import load_trace
from ddpsim.analysis import phase_medians
from ddpsim.samples import BUNDLED_DIR  # the recordings that come with ddpsim

shuffled_run = load_trace(BUNDLED_DIR / "03_shuffled_torch_default.json")
shuffled = learn(shuffled_run)
for net in ({}, {"bandwidth_gbps": 10, "latency_us": 20, "interference": 0}):
    out, backward = {}, {}
    for order in ("reverse", "ready"):
        tr, s = simulate(shuffled, replay_config(shuffled, shuffled_run, bucket_cap_mb=5, order=order, **net))
        out[order], backward[order] = s, phase_medians(tr)["compute"]  # the backward up to its last gradient
    name = "this machine" if not net else "10 Gbit/s what-if"
    print(f"{name:18} construction order {out['reverse']['iteration_time_s'] * 1e3:7.1f} ms "
          f"(exposed {out['reverse']['exposed_comm_s'] * 1e3:5.1f}) | rebuilt (ready) order "
          f"{out['ready']['iteration_time_s'] * 1e3:7.1f} ms (exposed {out['ready']['exposed_comm_s'] * 1e3:5.1f})")
    print(f"{'':18} backward compute (phase_medians) {backward['reverse'] * 1e3:5.1f} -> "
          f"{backward['ready'] * 1e3:5.1f} ms")'''),
    M("""Exposed communication is not the time an order saves. On this machine the rebuilt order hides
28 ms more of it (exposed 45.5 -> 17.5 ms), yet the iteration is only 2.2 ms shorter (109.9 ->
107.7 ms): gloo's threads share each rank's core with autograd (section 2), so the allreduces that
now run during the backward slow it down, from 44.4 to 73.3 ms in this replay (the cell's
`backward compute` lines: the `compute` of `ddpsim.analysis.phase_medians` on each simulated
trace). The what-if's `interference: 0` takes the communication off the compute core (an explicit
interference turns `shared_core` off): there the backward stays near 44 ms (44.3 -> 46.3), and the
same order saves 9.4 of the 11.4 ms it stops exposing (85.7 -> 76.3 ms)."""),
    M("""## 4. Check the prediction against real runs

The prediction replays the run of section 1; a run recorded now sees the machine as it is now.
On a quiet machine, two launches of the same configuration here differed by 1-7%; while other
jobs shared the 2 cores, torch's default cap took 95 ms in one launch and 59 ms in the next, and
the measured order of the caps even reversed (the smallest caps came out fastest). So we record
the best cap of the sweep and torch's default *together*, interleaved iteration by iteration in
the same ranks (`record_many`, as `validate --grid` does): a slow spell hits both alike, and
their difference is the caps' own. On a quiet machine our runs came within about ±12% of
their predictions; under other jobs (a load average above 2 on these 2 cores), expect neither
to hold."""),
    C('''import os
from ddpsim.record.launcher import record_many

runs = record_many([RecordConfig(model="transformer", world_size=2, iters=20, bucket_cap_mb=c)
                    for c in (best["bucket_cap_mb"], None)], [WORK / "best.json", WORK / "default.json"])
real = [summarize(r)["iteration_time_s"] for r in runs]
sim = [best["iteration_time_s"], replay["iteration_time_s"]]
for name, m, p in zip((f"cap {best['bucket_cap_mb']} MiB", "default cap"), real, sim):
    print(f"{name:14}: predicted {p * 1e3:5.1f} ms, measured {m * 1e3:5.1f} ms ({m / p - 1:+.0%})")
print(f"best against default: predicted {sim[0] / sim[1] - 1:+.1%}, measured {real[0] / real[1] - 1:+.1%} "
      f"(recorded together; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
print("buckets after the rebuild:", len(runs[0].ranks[0].layouts[-1].buckets))'''),
    M("""The line before last is the check that matters: the gap the sweep predicted beside the gap
measured. On this 2-core CPU, runs recorded together on a quiet machine have measured one bucket
faster than two by more than the sweep says: the sweep orders the caps as this machine
does, but understates the gaps. That is what a simulator is
for, and where it stops: it ranks configurations in seconds, and the one you pick still
deserves a real run recorded beside the one you had."""),
    M("""## Try it yourself
- Sweep with a base of `{"jitter": 0.1}` (a dict changes the replay): does the best cap move?
- Sweep over a network that does not share the core, `{"shared_core": False, "bandwidth_gbps": 1, "latency_us": 500}`: where is the sweet spot now?
- Which cap would you choose for the `mlp` (12 MB of gradients in 10 tensors)? Why does its sweep look flat at small caps?
- **Assignment part 3** asks you to make this prediction and defend it.

Next: **04 · Unused parameters and no_sync**."""),
    C(CLEANUP),
]

# --------------------------------------------------------------------------------------------
NB04 = [
    M("""# 04 · Unused parameters, no_sync and static_graph

**What you will learn:** what happens when some parameters get no gradient (the `branchy`
model): the error without `find_unused_parameters` and why it comes one iteration late; what the
flag does (a graph search after every forward, an allreduce of a used-parameter bitmap) and what
that costs; gradient accumulation with `no_sync` and what it saves; and `static_graph`.

**Time:** about 1–2 minutes to run (5 real 2-process runs), 25 minutes to read.
Builds on notebooks 01–03."""),
    C(setup("nb04")),
    C('''from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import RecordError, record
from ddpsim.viz import plot_timeline

def run(name, **options):
    options.setdefault("world_size", 2)
    t = time.time()
    tr = record(RecordConfig(**options), WORK / f"{name}.json")
    print(f"{name}: recorded in {time.time() - t:.1f} s")
    return tr'''),
    M("""## 1. Without the flag: the error, explained

`branchy` uses an extra branch only when `(iteration + rank)` is even, so in every iteration one
rank computes no gradient for the branch's parameters. Their bucket never becomes full on that
rank, its allreduce never launches, and DDP notices at the **next** forward
(`ensure_prior_reduction_finished`). ddpsim stops the other rank and says which parameters."""),
    C('''try:
    run("branchy_no_flag", model="branchy", iters=3)
    raise AssertionError("expected this run to fail")
except RecordError as e:
    print(str(e).replace(". ", ".\\n"))'''),
    M("""## 2. With `find_unused_parameters=True`

After each forward, DDP walks the autograd graph from the outputs (`search_unused_parameters`)
and marks every parameter it cannot reach as ready at the first hook, so every bucket still
launches. After the last bucket, a small int bitmap of used parameters is allreduced, so a
parameter unused on *every* rank keeps its `.grad` untouched. The flag also turns off the
rebuild: the construction layout stays."""),
    C('''fu = run("branchy_flag", model="branchy", iters=5, find_unused_parameters=True)
for it in fu.ranks[0].iterations:
    unused = [g.param for g in it.grad_ready if g.unused]
    search = it.graph_search.duration_ns / 1e6 if it.graph_search else float("nan")
    bitmap = it.bitmap_allreduce
    bm = f"{(bitmap.complete_ns - bitmap.launch_ns) / 1e6:.2f} ms ({bitmap.bytes} B)" if bitmap else "-"
    print(f"iteration {it.iteration}: unused params {unused}, graph search {search:.3f} ms, bitmap allreduce {bm}")
print("layouts:", [(l.from_iteration, l.kind) for l in fu.ranks[0].layouts])'''),
    M("""The bitmap allreduce is tiny (one int per parameter), yet on the rank that skipped the branch
it can take as long as the other rank's extra backward: a collective ends only when every rank
has joined it, so this span also shows the ranks waiting for each other."""),
    C('''plot_timeline(fu, 2)'''),
    M("""What does the flag cost? The search and the bitmap are small next to a whole iteration here. At
scale the flag also costs the rebuild: its buckets keep the construction layout (reverse definition
order) instead of the order gradients arrived in. For a model whose gradients arrive in about
reverse definition order, as BERT-large's layers do, that is nearly free; a what-if on 64 A100s
(the `shuffled` model of notebook 03 is one where the order costs):"""),
    C('''from ddpsim.sim import SimConfig, simulate, synthetic

bert = synthetic("bert-large", "a100-ib200")
for flag in (False, True):
    _, s = simulate(bert, SimConfig(world_size=64, iters=3, find_unused_parameters=flag))
    print(f"find_unused_parameters={flag!s:5}: {s['iteration_time_s'] * 1e3:6.1f} ms/iteration, "
          f"exposed comm {s['exposed_comm_s'] * 1e3:5.1f} ms")'''),
    M("""## 3. `no_sync`: accumulate locally, reduce once

Inside `with ddp.no_sync():` (forward *and* backward) DDP skips the bucket copies and the
allreduce; gradients accumulate in `.grad`. The first synced step afterwards reduces the sum.
With `no_sync_every=3`, two of every three micro-steps communicate nothing."""),
    C('''every = run("mlp_sync_every_step", model="mlp", iters=6)
acc = run("mlp_no_sync_3", model="mlp", iters=6, no_sync_every=3)

def comm_ms(tr):
    return sum((b.complete_ns - b.launch_ns) / 1e6 for it in tr.ranks[0].iterations for b in it.buckets)

for name, tr in (("every step", every), ("no_sync_every=3", acc)):
    syncs = sum(it.sync for it in tr.ranks[0].iterations)
    n = sum(len(it.buckets) for it in tr.ranks[0].iterations)
    print(f"{name:16} {syncs} synced micro-steps of 6, {n:2d} allreduces, {comm_ms(tr):7.1f} ms allreduce time in total")
count = lambda tr: sum(len(it.buckets) for it in tr.ranks[0].iterations)  # noqa: E731
assert count(acc) < count(every)'''),
    C('''plot_timeline(acc, 4)'''),
    M("""## 4. `static_graph=True`

Telling DDP the graph never changes lets it skip the per-iteration search even when some
parameters are unused. In torch 2.13 the first iteration reduces everything after backward
(`delay_all_reduce`), and the rebuild happens one iteration later than usual."""),
    C('''st = run("mlp_static", model="mlp", iters=4, static_graph=True)
print("layouts:", [(l.from_iteration, l.kind, len(l.buckets)) for l in st.ranks[0].layouts])
print("graph searches:", sum(it.graph_search is not None for it in st.ranks[0].iterations))'''),
    M("""## Try it yourself
- Record `branchy` with `find_unused_parameters=True` and `world_size=2`, then look at which parameters have `unused` marks on which rank.
- Simulate `no_sync_every` 1, 2, 4, 8 for ResNet-50 on `v100-eth10`: how much communication time per sample does accumulation save?

Next: **05 · Scaling up**."""),
    C(CLEANUP),
]

# --------------------------------------------------------------------------------------------
NB05 = [
    M("""# 05 · Scaling up: what-ifs on hardware we don't have

**What you will learn:** how to use ddpsim's simulator for ResNet-50 and BERT-large on GPU
profiles, from 8 to 4096 GPUs; why every iteration waits longer for its slowest rank as the
world grows (up to 100,000 ranks); how the best bucket size moves with the model size and the
network; and how that compares with the lessons of the DDP paper (Li et al., VLDB 2020): the
bucket size can matter by more than 2x, and the best size grows sub-linearly with the model.

**Time:** under a minute to run (simulation only), 20 minutes to read. Builds on notebook 03.

These are *predictions* from a model with datasheet-level GPU and network numbers
(`ddpsim/sim/hardware/*.json`), not measurements. Section 1 shows what that costs: against one
published benchmark the profile's GPU rate makes every step about a fifth too long, and one
measured number fixes that. So read this notebook's absolute times as rough, and compare its
configurations with each other (bucket sizes, networks, world sizes on one profile); treat
differences under ~10% between them as noise."""),
    C(setup("nb05")),
    C('''from ddpsim.sim import SimConfig, simulate, sweep, synthetic
from ddpsim.viz import plot_sweep

CAPS = [0.25, 1, 4, 10, 25, 50, 100, 200]
def best(rows):
    return min(rows, key=lambda r: r["iteration_time_s"])'''),
    M("""## 1. ResNet-50 and BERT-large on GPU profiles

`synthetic(arch, "gpu-network")` builds a workload from a published architecture's parameter
table and a GPU profile. ResNet-50 has 25.6M parameters (~100 MB of fp32 gradients), BERT-large
~335M (~1.3 GB)."""),
    C('''models = {"ResNet-50": synthetic("resnet50", "v100-ib100"), "BERT-large": synthetic("bert-large", "v100-ib100")}
for name, w in models.items():
    total = sum(p.bytes for p in w.params) / 2**20
    _, s = simulate(w, SimConfig(world_size=32, iters=3))
    print(f"{name:10} {len(w.params):4d} tensors, {total:7.1f} MiB gradients, 32 V100s on 100 Gb/s IB: "
          f"{s['iteration_time_s'] * 1e3:7.1f} ms/iteration, overlap {s['overlap_fraction']:.0%}")'''),
    M("""A reference point: PyTorch's DDP benchmark (`benchmarks/distributed/ddp/README.md` in
pytorch/pytorch) measured ResNet-50 at batch 32 per V100 with DDP at 0.100 s per iteration on 1
GPU and 0.104 s on 16 GPUs (2 DGX-1 machines, 4x100Gb InfiniBand each); its 0.097 s row is the same
model *without* DDP. The V100 profile's GPU rate (`effective_tflops`, the datasheet's fp32 peak
times a typical efficiency: not a measurement) makes the step longer than that:"""),
    C('''from ddpsim.experiments.published import SOURCES, reproduce

bench = SOURCES[0]  # PyTorch's DDP benchmark, ResNet-50 batch 32 on DGX-1 V100s
assert bench["arch"] == "resnet50" and bench["batch"] == 32 and bench["unit"] == "s"
w = synthetic("resnet50", "v100-ib100")
for ws, published in ((1, bench["baseline"][1]), (16, bench["targets"][-1][2])):
    _, s = simulate(w, SimConfig(world_size=ws, iters=3))
    t = s["iteration_time_s"]
    print(f"{ws:2d} V100s at the profile's {w.meta['effective_tflops']:g} TFLOP/s: simulated {t:.3f} s, "
          f"published {published:.3f} s ({t / published - 1:+.0%})")'''),
    M("""The profile's rate makes the step about a fifth too long here, at 1 GPU as at 16: the error is
the GPU's speed, not DDP. `python -m ddpsim published` (the README's accuracy table) does not use
the profile's rate: it learns one number from the benchmark, the rate at which the simulated
1-GPU step takes the published 0.100 s, and predicts every other row from the DDP model and the
hardware profiles (NVLink inside a DGX-1, InfiniBand between two), each rank waiting for the
slowest. The same call here:"""),
    C('''rows = reproduce(bench)
print(f"fitted GPU rate {rows[0]['fitted_tflops']:.2f} TFLOP/s (the profile says {w.meta['effective_tflops']:g})")
for r in rows:
    print(f"{r['world_size']:2d} V100s ({r['network']:>6}): published {r['published']:.3f} s, "
          f"simulated {r['predicted']:.3f} s ({r['rel_error']:+.1%}), {r['role']}")'''),
    M("""With its rate learnt from one measurement, the simulator lands within about 3% of every
published row, and from 1 to 16 GPUs both grow by a few percent only: DDP hides most of ResNet-50's
communication behind its backward on these networks. The rest of this notebook keeps the
profiles' rates (there is no measurement for most of its GPUs and models), which is why its
absolute times are rough and its comparisons are what to read."""),
    M("""## 2. World sizes from 8 to 4096

A ring allreduce's time grows with `2(k-1)/k` (bandwidth, almost flat) and `2(k-1)` latency steps
(linear in the number of ranks); a tree's latency grows with log2 of the number of nodes. NCCL
estimates both, with each protocol, from its own tuning table and runs the fastest
(`ddpsim/sim/nccl.py`): rings for large buckets on few nodes, trees at thousands of ranks. The
GPUs of a node share its NICs. And every step waits for the slowest rank: with the GPU profile's
0.4% rank-to-rank spread, the expected slowest of N grows about as `sqrt(2 ln N)` (section 3)."""),
    C('''w = synthetic("resnet50", "a100-ib200")
noise = {"jitter": w.meta["rank_spread"], "jitter_mode": "expected"}  # every rank waits for the slowest
_, single = simulate(w, SimConfig(world_size=1, iters=3))
print(f"{'GPUs':>6} {'ms/iter':>8} {'efficiency':>10} {'exposed comm':>13}  NCCL on the largest bucket")
for ws in (8, 64, 512, 4096):
    _, s = simulate(w, SimConfig(world_size=ws, iters=3, **noise))
    big = max(s["nccl"], key=lambda b: b["bytes"])
    print(f"{ws:6d} {s['iteration_time_s'] * 1e3:8.1f} {single['iteration_time_s'] / s['iteration_time_s']:10.0%} "
          f"{s['exposed_comm_s'] * 1e3:10.1f} ms  {big['algo']}/{big['proto']}")'''),
    M("""## 3. Waiting for the slowest rank (stragglers)

All the numbers in this section are SIMULATED: the V100 profile and a model of rank noise, not a
measurement on 100,000 GPUs.

No two GPUs finish a step in exactly the same time: clocks, temperature, the data loader and the
operating system make each rank a little faster or slower from one iteration to the next. The GPU
profiles take a spread (*jitter*: the standard deviation of one rank's step compute over its
mean) of 0.4%; a recording measures its own. DDP's allreduce of a bucket can only finish once
**every** rank has sent that bucket, so each iteration ends when the *slowest* rank does, and
all the others wait for it. With 8 ranks the slowest is only a little slow; with 100,000 ranks
one of them is almost surely far out in the tail. For normally distributed step times the
expected slowest of N computes `1 + jitter x E[max of N standard normals]` times the typical
step, and that maximum grows about as `sqrt(2 ln N)`: 1.4 at 8 ranks, 3.6 at 4096, 4.4 at
100,000. This is an *extreme-value* effect: slow, but it never stops growing, and no network,
bucket size or overlap can hide it (the others sit idle while the slowest one still computes).

`python -m ddpsim simulate --arch ...` plays that expectation (`arch_defaults`: the profile's
spread, `jitter_mode="expected"`) and reports the wait as the iteration time with the noise
minus the same simulation without it (`ddpsim.learn.noise.wait_s`; the model is
Note [Waiting for the slowest rank] in `ddpsim/sim/stragglers.py`). The cell below makes the
same calls, so its last row is what `python -m ddpsim simulate --arch resnet50 --hardware
v100-ib100 --world-size 100000` prints."""),
    C('''from ddpsim.learn.noise import wait_s
from ddpsim.sim.archs import arch_defaults
from ddpsim.sim.stragglers import expected_max

w = synthetic("resnet50", "v100-ib100")
defaults = arch_defaults(w)  # what `simulate --arch` runs with: the profile's rank spread, jitter_mode "expected"
print(f"ResNet-50 on V100s, 100 Gb/s IB (SIMULATED), jitter {defaults['jitter']:.1%}, "
      f"jitter_mode {defaults['jitter_mode']!r}")
print(f"{'ranks':>7} {'E[max]':>7} {'iteration':>10} {'waiting for stragglers':>23}")
for ws in (8, 64, 512, 4096, 32768, 100_000):
    cfg = SimConfig(**{**defaults, "world_size": ws})
    _, s = simulate(w, cfg)
    t, wait = s["iteration_time_s"], wait_s(simulate, w, cfg, s)
    print(f"{ws:7d} {expected_max(ws):7.2f} {t * 1e3:7.3f} ms {wait * 1e3:10.3f} ms ({wait / t:4.1%})")'''),
    C('''from matplotlib.figure import Figure

SIZES = [2**k for k in range(3, 17)] + [100_000]  # 8 ... 65,536 ranks, then 100,000
SPREADS = [defaults["jitter"], 0.01, 0.02, 0.05]   # the profile's 0.4%, then noisier ranks
fig = Figure(figsize=(10, 3.8), layout="constrained")
left, right = fig.subplots(1, 2)
quiet = [simulate(w, SimConfig(world_size=ws, jitter=0.0))[1]["iteration_time_s"] * 1e3 for ws in SIZES]
left.plot(SIZES, quiet, "k--", label="no rank noise")
for jitter in SPREADS:
    times, waits = [], []
    for ws in SIZES:
        cfg = SimConfig(**{**defaults, "world_size": ws, "jitter": jitter})
        _, s = simulate(w, cfg)
        times.append(s["iteration_time_s"] * 1e3)
        waits.append(wait_s(simulate, w, cfg, s) * 1e3)
    left.plot(SIZES, times, "o-", ms=3, label=f"jitter {jitter:.1%}")
    right.plot(SIZES, waits, "o-", ms=3, label=f"jitter {jitter:.1%}")
    print(f"jitter {jitter:4.1%}: waiting {waits[0]:5.2f} ms of {times[0]:5.1f} at 8 ranks, "
          f"{waits[-1]:5.2f} ms of {times[-1]:5.1f} at 100,000 ({waits[-1] / times[-1]:.1%})")
left.set(xscale="log", xlabel="ranks (GPUs)", ylabel="ms per iteration",
         title="ResNet-50, V100s, 100 Gb/s IB (SIMULATED)")
right.set(xscale="log", xlabel="ranks (GPUs)", ylabel="ms of it waiting for stragglers",
          title="the part spent waiting for the slowest rank")
left.legend(fontsize=8)
fig'''),
    M("""Reading the figure: at the profile's 0.4% the wait grows from about 0.7 ms at 8 ranks to 2.1 ms
at 100,000, three times more, as `E[max]` grows from 1.4 to 4.4; against a 124 ms step that is
under 2%, because GPU-bound steps vary little. The dashed line is the rest of the growth: the
network (more tree steps, more exposed communication). The wait is proportional to the jitter:
at 5% the same curve is 12.5 times higher (5% / 0.4%): 8.6 ms at 8 ranks and 26.5 ms at 100,000 (18% of
every step). Two lessons for large jobs: going from 10,000 to 100,000 ranks adds little waiting
(the `sqrt(2 ln N)` is slow), but whatever makes *one* rank noisier (a data loader that stalls, a
GPU that throttles, a node shared with another job) is paid by *all* of them, every iteration.
With `no_sync_every=k` (gradient accumulation) the ranks re-align once per k micro-steps, and
the spread of a window shrinks to `jitter / sqrt(k)`. The model assumes independent, normal
noise; real clusters also have persistent stragglers (one slow node), which
`SimConfig(stragglers={rank: factor})` plays, and which cost more than this."""),
    M("""## 4. The best bucket size, by model and network"""),
    C('''results = {}
for arch in ("resnet50", "bert-large"):
    for net in ("v100-eth10", "v100-ib100", "a100-ib400"):
        rows = sweep(synthetic(arch, net), {"bucket_cap_mb": CAPS}, SimConfig(world_size=64, iters=3))
        times = [r["iteration_time_s"] for r in rows]
        results[(arch, net)] = rows
        print(f"{arch:10} {net:11} best {best(rows)['bucket_cap_mb']:6g} MiB "
              f"({best(rows)['iteration_time_s'] * 1e3:7.1f} ms), worst/best {max(times) / min(times):4.2f}x")'''),
    C('''plot_sweep(results[("resnet50", "v100-eth10")], title="ResNet-50, 64 V100s, 10 GbE (simulated)")'''),
    M("""## 5. Compared with the paper's lessons

1. *The right bucket size can give more than a 2x speedup.* Look at the worst/best column: on a
   slow network the spread is large; on fast InfiniBand, where communication hides behind compute,
   it shrinks. Let's find the largest spread in a quick grid, including a bigger world."""),
    C('''spreads = []
for arch in ("resnet50", "bert-large"):
    for net in ("v100-eth10", "v100-ib100"):
        for ws in (64, 256):
            rows = sweep(synthetic(arch, net), {"bucket_cap_mb": [0.05, 0.25] + CAPS[1:]},
                         SimConfig(world_size=ws, iters=3))
            times = [r["iteration_time_s"] for r in rows]
            spreads.append((max(times) / min(times), arch, net, ws))
spreads.sort(reverse=True)
for spread, arch, net, ws in spreads[:4]:
    print(f"{spread:4.2f}x  {arch} on {net}, {ws} GPUs")
print("paper's >2x reproduced in this grid:", spreads[0][0] > 2)'''),
    M("""If that printed False: on these datasheet profiles the grid's largest spread stays below 2x. The
paper's 2x came from its own models and clusters; a spread below it here is a result, not an
error, and a slower network or a bigger world size moves the spread up."""),
    M("""2. *The best size grows with the model, sub-linearly.* BERT-large has ~13x the gradient bytes
of ResNet-50; compare the ratio of their best bucket sizes on each network (when a sweep is flat,
several sizes are within noise of the best, so read this as a trend, not a law). Where the network
is fast enough to hide all communication behind the backward, the sweep is flat and its "best"
says nothing; the paper's lesson shows where communication is exposed, e.g. on 10 GbE."""),
    C('''for net in ("v100-eth10", "v100-ib100", "a100-ib400"):
    r, b = best(results[("resnet50", net)]), best(results[("bert-large", net)])
    ratio = b["bucket_cap_mb"] / r["bucket_cap_mb"]
    print(f"{net:11} ResNet-50 best {r['bucket_cap_mb']:6g} MiB, BERT-large best {b['bucket_cap_mb']:6g} MiB: "
          f"ratio {ratio:5.2f} (model size ratio ~13)")'''),
    M("""## Try it yourself
- Add `gpt2` (its lm_head is tied to the embedding, so that gradient arrives last).
- Section 3 at 5% jitter with `no_sync_every=4`: how much of the wait does gradient accumulation save?
- Force NCCL's algorithm with `algo="ring"` at 4096 ranks: what does the tree save?
- The default 25 MiB is debated (pytorch/pytorch issue 118421 proposes larger buckets): what do your sweeps say for H100s on `ib400`?

Next: notebook 06, communication hooks. The course assignments are in `assignments/` (see `assignments/README.md`)."""),
    C(CLEANUP),
]

# --------------------------------------------------------------------------------------------
NB06 = [
    M("""# 06 · Communication hooks: when does compression pay?

**What you will learn:** what a DDP *communication hook* is (`register_comm_hook`), what torch's
own hooks send instead of a bucket's fp32 allreduce (fp16 and bf16 compression, PowerSGD's
low-rank factors, nothing at all), what they cost in compute, and on which networks compression
makes an iteration faster: the **break-even bandwidth**.

**Time:** about 1 minute to run (one real 2-process recording on CPU), 20 minutes to read.
Builds on notebooks 01-05."""),
    C(setup("nb06")),
    M("""## 1. A hook replaces the bucket's allreduce

When a bucket is full, DDP's reducer calls `run_comm_hook(bucket)`. Without a hook that is an
allreduce of the bucket (divided by the world size while copying gradients in). With
`ddp.register_comm_hook(state, hook)`, DDP calls `hook(state, bucket)` instead and waits for the
future it returns. torch ships a few; here is the fp16 one, verbatim:"""),
    C('''import inspect
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
print(inspect.getsource(default_hooks._compress_hook))'''),
    M("""It casts the bucket to 16-bit floats (half the bytes), allreduces that, and casts back in the
future's callback. PowerSGD goes further: it approximates every gradient matrix M (viewed as
`shape[0] x rest`) by P Q^T of rank r (torch's default r = 1, as in the cell below; section 2 uses r = 4) and
allreduces only P and Q, one after the other, after one allreduce of what it leaves uncompressed: the
1-D tensors and any matrix too small to gain (`min_compression_rate`, default 2). (Before
`start_powerSGD_iter`, default 1000, it is a plain allreduce; the cell starts it at 0.) The
simulator models what each hook sends (`ddpsim/sim/comm_hooks.py`; PowerSGD's P and Q sizes are
checked against torch's own hook in `tests/test_sim_comm_hooks.py`):"""),
    C('''from ddpsim.sim.comm_hooks import CommHook, stages

shapes = [(1024, 1024), (1024,), (10, 1024)]  # a linear layer's weight and bias, a small head
for name, extra in [("allreduce", {}), ("fp16", {}), ("noop", {}), ("powersgd", {"powersgd_start_iter": 0})]:
    sent = stages(CommHook(name, **extra), shapes, 4, step=1)
    print(f"{name:10s} stages (bytes per collective): {sent}")'''),
    M("""## 2. Where compression pays: a GPU cluster, simulated

A 16-bit bucket is half the bytes, PowerSGD (rank 4) a small fraction, but every hook adds
compute (the casts, PowerSGD's matmuls, priced here at the GPU's memory and compute rates) and
PowerSGD turns one allreduce per bucket into three that must run one after another. Whether that
pays depends on the network. The simulator plays ResNet-50 on 64 V100s and BERT-large on 64
A100s, the profiles' network with its bandwidth replaced, from 1 to 800 Gbit/s per rank
(`python -m ddpsim.experiments.compression` prints the same tables). These are SIMULATED: no
cluster was run, and PowerSGD's effect on convergence is not modelled, only its time."""),
    C('''from ddpsim.experiments.compression import break_even_gbps, iteration_vs_bandwidth
from ddpsim.viz import plot_compression

cases = {}
for arch, hardware, label in [("resnet50", "v100-eth25", "ResNet-50, 64 V100s"),
                              ("bert-large", "a100-eth100", "BERT-large, 64 A100s")]:
    rows = iteration_vs_bandwidth(arch, hardware, world_size=64)
    be = {h: break_even_gbps(rows, h) for h in ("fp16", "powersgd")}
    cases[label] = (rows, be)
    print(label, "break-even bandwidth (Gbit/s):", {h: None if v is None else round(v) for h, v in be.items()})
    display(plot_compression(rows, be, label))'''),
    M("""Read each figure from the left: on slow networks the allreduce dominates and every hook wins,
PowerSGD by an order of magnitude. As bandwidth grows the plain allreduce hides behind the
backward, and a hook's extra work shows: PowerSGD's three sequential, latency-bound collectives
per bucket and its matmuls make it *slower* above its break-even bandwidth; fp16's casts cost
little on a GPU, so it keeps a small edge until the communication is fully hidden.

## 3. On this machine: real recordings, and the prediction from a plain run

Now real runs: two gloo processes on this CPU train the zoo's `mlp` (buckets of 0.25 MiB) with
torch's `allreduce_hook`, `fp16_compress_hook`, `bf16_compress_hook` (under another name: torch
refuses that name without CUDA, yet gloo sums bf16) and `noop_hook`, taking turns step by step in
the same processes (`record_many`) so that a slow spell of the machine hits all four alike.
At its end every recording also measures, in its own ranks, what a hook's pieces cost there
(`meta.hook_rates`, `ddpsim/record/hookprobe.py`): a cast of a bucket, a matmul, an fp16 and a
bf16 allreduce against an fp32 one of as many elements, a small allreduce's latency."""),
    C('''from ddpsim.experiments import hooks as hook_runs
from ddpsim.record.config import RecordConfig
from ddpsim.record.launcher import record_many
from ddpsim.trace import load_trace

names = ("allreduce", "fp16", "bf16", "noop")
paths = {h: WORK / f"mlp_{h}.json" for h in names}
t0 = time.time()
record_many([RecordConfig(model="mlp", iters=32, bucket_cap_mb=0.25, comm_hook=h, profile_internals=False)
             for h in names], list(paths.values()))
print(f"recorded {len(names)} runs in {time.time() - t0:.0f} s")
rates = load_trace(paths["allreduce"]).meta["hook_rates"]
for name, value in rates.items():
    print(f"{name:25s} {value:.3g}")'''),
    M("""The two `*_allreduce_cost` lines are the surprise a GPU user does not expect: they are an fp16
(bf16) allreduce's time over an fp32 one's *of as many elements*. NCCL on a GPU reduces 2-byte
floats at memory speed, so the ratio is 0.5 there: half the bytes, half the time. gloo on a CPU
sums float16 through float conversions, element by element, and its ratio is near 1 or above (the
bytes halve, the time does not); bfloat16's is lower, 0.67-1.03 on the machine these notebooks
were built on. Below, the simulator learns this run from the `allreduce`
recording alone (its buckets, its backward, these rates) and predicts each hook's run; the last
columns compare with the run that really used the hook (each rank's own iteration, median over
the steady steps). "noise" is how far the error would move from the sampling of the steps alone:
an error within about that much is the machine's, not the model's:"""),
    C('''rows = hook_runs.predict(paths, "mlp", 0.25)
print(hook_runs.table(rows))'''),
    M("""Read the table with its "noise" column and its allreduce run: on a busy machine (other work on
the cores: noise of several percent, an allreduce run far above the 30 ms a quiet 2-core machine
gives) the hooked runs can come out far from their allreduce run and from the prediction, and
the comparison says nothing. On a quiet one (`docs/comm-hooks.md`: noise under 4%), compression gains little: fp16 and bf16 send half the bytes, but gloo's
16-bit sums and the casts cost about what the bytes saved (bf16 a little less), and `noop` (nothing sent at all)
is the bound no hook can beat: the compute alone. (`docs/comm-hooks.md` has the same prediction
for three models, two caps and every hook.) The Timeline draws a hook inside each bucket's span: the cast before
its collective (hatched), the collective with what it sent, the cast back after it:"""),
    C('''from ddpsim.viz import plot_compare

runs = [(f"mlp, {h} hook", load_trace(paths[h])) for h in ("allreduce", "fp16")]
display(plot_compare(runs))'''),
    M("""## 4. What this leaves out

- The hooks' compute runs on the GPU at its memory bandwidth; real kernels have launch costs.
- The bandwidth sweep changes one number of the network; real fabrics differ in latency and
  topology too (`docs/reproductions.md` for NCCL's algorithms at scale).
- Only time: compression changes the gradients, and PowerSGD needs error feedback and warm-up
  iterations (`start_powerSGD_iter`) to converge like plain SGD."""),
    C(CLEANUP),
]

NOTEBOOKS = {
    "01_ddp_from_the_outside": NB01,
    "02_inside_the_reducer": NB02,
    "03_bucket_size_and_ordering": NB03,
    "04_unused_parameters_and_no_sync": NB04,
    "05_scaling_up": NB05,
    "06_comm_hooks": NB06,
}


def build(names=()) -> list[Path]:
    """Write the notebooks (all, or only ``names``) from their cells, without outputs."""
    paths = []
    for name, cells in NOTEBOOKS.items():
        if names and name not in names:
            continue
        nb = new_notebook(cells=cells, metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"}})
        for i, cell in enumerate(nb.cells):
            cell["id"] = f"{name[:2]}-{i:02d}"  # stable ids: rebuilding gives the same file
        nbformat.validate(nb)
        path = HERE / f"{name}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def execute(path: Path, timeout_s: int = 600) -> float:
    """Run notebook ``path`` top to bottom with this Python and save it with its outputs."""
    import json  # noqa: PLC0415 (only --execute needs these)
    import os  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import tempfile  # noqa: PLC0415
    import time  # noqa: PLC0415

    import nbclient  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as root:  # a "python3" kernel that is this interpreter
        spec = Path(root) / "kernels" / "python3"
        spec.mkdir(parents=True)
        spec.joinpath("kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3", "language": "python"}))
        old = os.environ.get("JUPYTER_PATH")
        os.environ["JUPYTER_PATH"] = os.pathsep.join([root] + ([old] if old else []))
        try:
            nb = nbformat.read(path, as_version=4)
            start = time.monotonic()
            nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout_s, allow_errors=False,
                                    record_timing=False,
                                    resources={"metadata": {"path": str(path.parent)}}).execute()
        finally:
            if old is None:
                os.environ.pop("JUPYTER_PATH", None)
            else:
                os.environ["JUPYTER_PATH"] = old
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return time.monotonic() - start


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--execute", action="store_true", help="also run each notebook and keep its outputs")
    parser.add_argument("names", nargs="*", help="only these notebooks (e.g. 03_bucket_size_and_ordering)")
    args = parser.parse_args()
    for p in build(args.names):
        print("wrote", p.relative_to(HERE.parent), flush=True)
        if args.execute:
            seconds = execute(p)
            print(f"  executed in {seconds:.0f} s, {p.stat().st_size / 1024:.0f} KiB", flush=True)
