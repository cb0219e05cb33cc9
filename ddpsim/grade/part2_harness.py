"""What the part 2 autograder runs on each rank: 5 steps of real 2-process training
with the student's BucketedDDP, reported to a ``ddpsim.events.RankRecorder`` by the
student's code and, independently, measured by the harness's own ``OverlapProbe``
(``ddpsim/grade/probe.py``: its own gradient hooks and its own wrapper around
``torch.distributed.all_reduce``). The overlap, order and bucket checks read the probe only.

The model, ``GradeNet``, has a frozen layer (requires_grad=False, so no gradient and
no hook), a tied weight (``fc3.weight is fc2.weight``: one parameter, used twice) and a
``head`` defined first but used last: its bucket (the last one) is full first, so a DDP that
launches buckets as they fill, not in bucket order, shows. Bucket sizes are all different,
so the harness tells buckets apart by the size of the tensor allreduced.
Each rank starts from a *different* random init (seed 100 + rank), so only the
constructor's broadcast can make them equal. Batches are fixed: rank r trains on
half r of the full batch, so DDP must match single-process training on the full batch.

A second, short run (``unused_rank_main``) trains ``UnusedNet`` for one backward: its ``unused``
layer is never called in the forward, so that parameter gets no gradient, its bucket never fills
and never launches (this DDP, like DDP with ``find_unused_parameters=False``, does not look for
unused parameters), and the student's finalize must raise a RuntimeError naming it.
"""
from __future__ import annotations

import importlib.util
import sys
import traceback

import torch
import torch.nn.functional as F
from torch import nn

from ddpsim.grade import watch
from ddpsim.grade.probe import OverlapProbe, expected_buckets

STEPS = 5
BUCKET_CAP_MB = 0.1  # ~100 KiB: six buckets for GradeNet (MiB, like DDP's bucket_cap_mb)
FULL_BATCH = 32
LR = 0.1


class GradeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(192, 136)  # defined first, used last: the last bucket, full first
        self.fc1 = nn.Linear(64, 192)
        self.frozen = nn.Linear(192, 192)
        self.frozen.requires_grad_(False)
        self.fc2 = nn.Linear(192, 192)
        self.fc3 = nn.Linear(192, 192)
        self.fc3.weight = self.fc2.weight  # tied: one parameter, two uses
        self.fc4 = nn.Linear(192, 160)
        self.fc5 = nn.Linear(160, 192)
        self.fc6 = nn.Linear(192, 192)

    def forward(self, x):
        for layer in (self.fc1, self.frozen, self.fc2, self.fc3, self.fc4, self.fc5, self.fc6):
            x = torch.relu(layer(x))
        return self.head(x)


def expected_params(model: nn.Module) -> list[nn.Parameter]:
    """DDP's parameter list: named_modules() x named_parameters(recurse=False), requires_grad, once."""
    seen, out = set(), []
    for _, m in model.named_modules():
        for _, p in m.named_parameters(recurse=False):
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def batch(step: int):
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randn(FULL_BATCH, 64, generator=g), torch.randint(0, 10, (FULL_BATCH,), generator=g)


def flat(model: nn.Module) -> list[float]:
    return torch.cat([t.detach().reshape(-1) for t in model.state_dict().values()]).tolist()


def load_student(path: str):
    name = "ddpsim_student_part2"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def single_process_reference() -> list[float]:
    """Rank 0's init, trained on the full batch in one process."""
    torch.manual_seed(100)
    model = GradeNet()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y = batch(step)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return flat(model)


def rank_main(rank: int, world: int, student_path: str, shard_template: str) -> dict:
    from ddpsim.events import RankRecorder, now_ns
    from ddpsim.record.instrument import param_table

    torch.manual_seed(100 + rank)
    model = GradeNet()
    # The harness's own clock goes in before the student's module is imported (a
    # `from torch.distributed import all_reduce` then gets the wrapper too) and hooks.
    probe = OverlapProbe(expected_params(model)).install()
    w = watched(probe, model, BUCKET_CAP_MB, student_path)
    student = load_student(student_path)
    header = {"world_size": world, "backend": "gloo", "impl": "student", "model": "GradeNet",
              "options": {"bucket_cap_mb": BUCKET_CAP_MB, "iters": STEPS},
              "config": {"model": "GradeNet", "world_size": world, "iters": STEPS,
                         "bucket_cap_mb": BUCKET_CAP_MB},
              "torch_version": torch.__version__, "params": param_table(model)}
    rec = RankRecorder(shard_template.format(rank=rank), rank, header)
    try:
        before = flat(model)
        w.at("BucketedDDP(...)")
        ddp = student.BucketedDDP(model, bucket_cap_mb=BUCKET_CAP_MB, recorder=rec)
        after_broadcast = flat(model)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        half = FULL_BATCH // world
        for step in range(STEPS):
            x, y = batch(step)
            x, y = x[rank * half:(rank + 1) * half], y[rank * half:(rank + 1) * half]
            rec.begin_iteration(step, True)
            probe.begin_iteration()
            f0 = now_ns()
            w.at("forward", step)
            loss = F.cross_entropy(ddp(x), y)
            f1 = now_ns()
            w.at("backward", step)
            loss.backward()
            b1 = now_ns()
            w.at("optimizer step", step)
            rec.span("forward", f0, f1)
            rec.span("backward", f1, b1)
            opt.step()
            opt.zero_grad(set_to_none=True)
            rec.span("optimizer", b1, now_ns())
            probe.end_iteration()
            rec.end_iteration()
        rec.finish(None)
        w.at("done")
    except BaseException as e:
        rec.fail(f"{type(e).__name__}: {e}")
        raise
    finally:
        probe.uninstall()
    return {"probe": [it.to_dict() for it in probe.iterations],
            "before": before, "after_broadcast": after_broadcast, "final": flat(model),
            "frozen_unchanged": torch.equal(model.frozen.weight, rank0_frozen_weight()),
            "tied": model.fc3.weight is model.fc2.weight}


def watched(probe, model, cap_mb: float, student_path: str):
    """This rank's ``watch.Watch`` (Note [A stuck rank says where]), reading the probe against DDP's layout."""
    params = expected_params(model)
    w = watch.current()
    w.attach(probe, expected_buckets(params, int(cap_mb * 1024 * 1024)), [p.numel() for p in params], student_path)
    w.at("importing your file")
    return w


def rank0_frozen_weight() -> torch.Tensor:
    """Rank 0's frozen weight (what every rank has after the broadcast)."""
    torch.manual_seed(100)
    return GradeNet().frozen.weight.detach()


# -- a parameter that gets no gradient (the autograder's last check) --------------------------
UNUSED_CAP_MB = 0.004  # ~4 KiB: UnusedNet's buckets [5, 6], [3, 4], [1, 2], [0]; [3, 4] never fills


class UnusedNet(nn.Module):
    """``unused`` (no bias: one parameter, DDP's index 4) is defined but never called in forward."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 32)  # parameters 0, 1
        self.fc2 = nn.Linear(32, 32)  # 2, 3
        self.unused = nn.Linear(32, 32, bias=False)  # 4: no gradient, ever
        self.head = nn.Linear(32, 10)  # 5, 6

    def forward(self, x):
        return self.head(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def ddp_param_names(model: nn.Module) -> list[str]:
    """The names of DDP's parameters (``expected_params``), in its order: the first name of each."""
    names = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), n)
    return [names[id(p)] for p in expected_params(model)]


def unused_param() -> tuple[str, int]:
    """The unused parameter's name and its index in DDP's parameter list."""
    model = UnusedNet()
    return "unused.weight", next(i for i, p in enumerate(expected_params(model)) if p is model.unused.weight)


def unused_rank_main(rank: int, world: int, student_path: str, shard_template: str) -> dict:
    """One forward and backward of UnusedNet through the student's BucketedDDP (recording, as in
    the graded run); what backward raised. A TODO left (NotImplementedError) is raised on."""
    from ddpsim.events import RankRecorder

    torch.manual_seed(200 + rank)
    model = UnusedNet()
    probe = OverlapProbe(expected_params(model)).install()  # only for a hang's message
    w = watched(probe, model, UNUSED_CAP_MB, student_path)
    student = load_student(student_path)
    rec = RankRecorder(shard_template.format(rank=rank), rank,
                       {"world_size": world, "backend": "gloo", "impl": "student", "model": "UnusedNet"})
    w.at("BucketedDDP(...)")
    ddp = student.BucketedDDP(model, bucket_cap_mb=UNUSED_CAP_MB, recorder=rec)
    half = FULL_BATCH // world
    x, y = batch(0)
    rec.begin_iteration(0, True)
    probe.begin_iteration()
    w.at("forward", 0)
    loss = F.cross_entropy(ddp(x[rank * half:(rank + 1) * half]), y[rank * half:(rank + 1) * half])
    try:
        w.at("backward", 0)
        loss.backward()
    except NotImplementedError:
        raise
    except Exception as e:  # noqa: BLE001 - what the student raised is the result
        w.at("done")
        return {"raised": type(e).__name__, "runtime_error": isinstance(e, RuntimeError),
                "message": str(e), "traceback": traceback.format_exc()}
    w.at("done")
    return {"raised": None}
