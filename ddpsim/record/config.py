"""What a recording runs: one RecordConfig, checked before any process starts."""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass

from ddpsim.buckets import LEGACY_ORDERS
from ddpsim.errors import STATIC_GRAPH_NO_SYNC, CLIError
from ddpsim.models import ModelSpecError, check_spec
from ddpsim.record.placement import Placement, choose_backend, local_ranks, visible_gpus

IMPLS = ("torch", "minddp", "naive", "overlap")
ORDERS = ("torch", "reverse", "definition")  # minddp's bucket_order: ddpsim.buckets.BucketOrder (not in torch)
BACKENDS = ("gloo", "nccl")
DEVICES = ("cpu", "cuda")
MAX_LOCAL_RANKS = 64  # ranks the launcher starts on one machine (each is a Python process with torch)
MAX_ITERS = 1_000_000  # micro-steps per recording
MAX_TIMEOUT_S = 86_400.0  # seconds (a day); torch's default collective timeout is 30 min


@dataclass
class RecordConfig:
    model: str = "mlp"  # zoo name, path/to/file.py:factory or package.module:factory
    world_size: int = 2  # ranks (processes); one GPU each with nccl
    iters: int = 6  # micro-steps (forward+backward) per rank
    impl: str = "torch"  # torch: torch's DDP; minddp: ddpsim's readable DDP; naive
    bucket_cap_mb: float | None = None  # MiB; None = torch's default 25 MiB with a 1 MiB first bucket
    # MiB per bucket, the first reduced first, the last repeated (torch 2.13's bucket_cap_mb_list, replaces
    # bucket_cap_mb); None: not given (torch's default None; then left out of the trace's meta)
    bucket_cap_mb_list: list[float] | None = None
    find_unused_parameters: bool = False  # torch default False
    static_graph: bool = False  # torch default False
    gradient_as_bucket_view: bool = False  # torch default False
    broadcast_buffers: bool = True  # rank 0's buffers to every rank before each forward; torch default True
    skip_all_reduce_unused_params: bool = False  # no allreduce for a bucket of unused params only; torch default False
    batched_grad_copy: bool = False  # copy a bucket's gradients with one foreach copy, then divide; torch default False
    no_sync_every: int | None = None  # sync every n-th micro-step (n-1 under no_sync); None: always
    uneven: int = 0  # uneven inputs: rank r runs uneven * r fewer micro-steps (not in torch); 0: all alike
    join: bool = False  # train inside model.join() (torch's Join; off by default, as in torch)
    divide_by_initial_world_size: bool = True  # DDP.join's argument; torch default True
    batch_size: int | None = None  # samples per rank per micro-step; None: the model's default
    seed: int = 0  # torch.manual_seed before building the model
    backend: str | None = None  # None: nccl with one visible GPU per local rank, else gloo (choose_backend)
    device: str | None = None  # cpu|cuda tensors; None: cuda with nccl, cpu with gloo (torch has no default)
    lr: float = 0.01  # SGD learning rate
    timeout_s: float = 60.0  # collective timeout (init_process_group timeout), seconds
    pin_cpus: bool = True  # pin rank r to CPU r % ncpus (removes a bimodal slowdown on CPU)
    profile_internals: bool = True  # torch impl + find_unused: profile the graph search and bitmap
    order: str | None = None  # minddp only: bucket_order torch|reverse|definition (not in torch); None: torch
    probe_allreduce_bytes: list[int] | None = None  # bytes; time one allreduce of each size after every
    # round of iterations, in these ranks (validate --grid's calibration); None: no probe (not in torch)
    comm_hook: str | None = None  # register_comm_hook: allreduce|fp16|bf16|powersgd|noop|round-robin:N|
    # path.py:factory (record/hooks.py); None: the recorder's own allreduce hook (torch default: no hook)
    powersgd_rank: int | None = None  # PowerSGD matrix_approximation_rank; None: torch's default 1
    powersgd_start_iter: int | None = None  # PowerSGD start_powerSGD_iter (iterations of plain allreduce
    # first); None: torch's default 1000

    HOOK_FIELDS = ("comm_hook", "powersgd_rank", "powersgd_start_iter")  # left out of meta.config when unset

    def validate(self) -> "RecordConfig":
        """Raise CLIError naming the first bad value; nothing has started yet."""
        self.order = LEGACY_ORDERS.get(self.order, self.order)
        checks = [
            (self.world_size >= 1, f"--world-size must be >= 1, not {self.world_size}"),
            (self.world_size <= MAX_LOCAL_RANKS,
             f"--world-size {self.world_size} is more ranks than one machine runs here (at most "
             f"{MAX_LOCAL_RANKS}); record across nodes with torchrun, or simulate larger worlds"),
            (self.iters >= 1, f"--iters must be >= 1, not {self.iters}"),
            (self.iters <= MAX_ITERS, f"--iters must be at most {MAX_ITERS}, not {self.iters}"),
            (self.impl in IMPLS, f"--impl must be one of {', '.join(IMPLS)}, not {self.impl!r}"),
            (self.no_sync_every is None or 1 <= self.no_sync_every <= MAX_ITERS,
             f"--no-sync-every must be between 1 and {MAX_ITERS}, not {self.no_sync_every}"),
            (not (self.static_graph and (self.no_sync_every or 1) > 1),  # Note [static_graph's first step must sync]
             STATIC_GRAPH_NO_SYNC.format(every=self.no_sync_every)),
            (self.batch_size is None or 1 <= self.batch_size <= MAX_ITERS,
             f"--batch-size must be between 1 and {MAX_ITERS}, not {self.batch_size}"),
            (math.isfinite(self.lr), f"--lr must be a finite number, not {self.lr}"),
            (self.backend is None or self.backend in BACKENDS,
             f"--backend must be gloo or nccl, not {self.backend!r}"),
            (math.isfinite(self.timeout_s) and 0 < self.timeout_s <= MAX_TIMEOUT_S,
             f"--timeout must be more than 0 and at most {MAX_TIMEOUT_S:.0f} seconds, not {self.timeout_s}"),
            (self.device is None or self.device in DEVICES,
             f"--device must be cpu or cuda, not {self.device!r}"),
            (self.order is None or self.order in ORDERS,
             f"--order must be one of {', '.join(ORDERS)}, not {self.order!r}"),
            (not self.probe_allreduce_bytes or min(self.probe_allreduce_bytes) > 0,
             f"probe_allreduce_bytes must be positive sizes, not {self.probe_allreduce_bytes}"),
            (0 <= self.uneven, f"--uneven must be >= 0 (rank r runs --iters minus K x r), not {self.uneven}"),
            (self.iters - self.uneven * (self.world_size - 1) >= 1,
             f"--uneven {self.uneven} leaves rank {self.world_size - 1} without iterations: rank r runs "
             f"--iters minus {self.uneven} x r ({self.iters} - {self.uneven} x {self.world_size - 1} < 1)"),
            *[(not given or self.impl in ("torch", "minddp"), f"{flag} needs --impl torch or minddp (got --impl {self.impl})")
              for flag, given in (("--join", self.join), ("--bucket-cap-mb-list", self.bucket_cap_mb_list is not None),
                                  ("--skip-all-reduce-unused-params", self.skip_all_reduce_unused_params),
                                  ("--batched-grad-copy", self.batched_grad_copy))],
            (self.join or self.divide_by_initial_world_size,
             "--no-divide-by-initial-world-size is an argument of model.join(): add --join"),
            (self.order is None or self.impl == "minddp",
             f"--order needs --impl minddp: torch's DDP cannot choose a bucket order (got --impl {self.impl})"),
        ]
        for ok, message in checks + self._hook_checks():
            if not ok:
                raise CLIError(message)
        from ddpsim.record.caps import check_caps
        check_caps(self)
        self._check_torch_takes()
        if self.comm_hook is not None:
            from ddpsim.record.hooks import check_comm_hook
            check_comm_hook(self.comm_hook)
        try:
            check_spec(self.model)
        except ModelSpecError as e:
            raise CLIError(str(e)) from None
        self.placement()  # a backend or device this node cannot run is an error now, not in a rank
        return self

    def _hook_checks(self) -> list[tuple[bool, str]]:
        """``--comm-hook`` and PowerSGD's options (the name itself: ``hooks.check_comm_hook``)."""
        powersgd = self.comm_hook == "powersgd"
        return [
            (self.comm_hook is None or self.impl == "torch",
             f"--comm-hook needs --impl torch (got --impl {self.impl})"),
            (self.comm_hook is None or not self.join, "--comm-hook cannot be recorded with --join yet"),
            (powersgd or (self.powersgd_rank is None and self.powersgd_start_iter is None),
             "--powersgd-rank and --powersgd-start-iter need --comm-hook powersgd"),
            (self.powersgd_rank is None or 1 <= self.powersgd_rank <= MAX_ITERS,
             f"--powersgd-rank must be between 1 and {MAX_ITERS}, not {self.powersgd_rank}"),
            (self.powersgd_start_iter is None or 2 <= self.powersgd_start_iter <= MAX_ITERS,
             f"--powersgd-start-iter must be between 2 (torch's PowerSGDState needs > 1 with error "
             f"feedback) and {MAX_ITERS}, not {self.powersgd_start_iter}"),
        ]

    def _check_torch_takes(self) -> None:
        """``--impl torch`` given an option this torch's DDP does not take (torch 2.13's): one line, before
        any rank starts (torchcompat.ddp_lacks; torch_ddp refuses it the same way in the ranks)."""
        if self.impl != "torch":
            return
        import torch

        from ddpsim import torchcompat

        lacks = torchcompat.ddp_lacks(asdict(self))
        if lacks:
            raise CLIError(f"--{lacks[0].replace('_', '-')}: this torch ({torch.__version__}) has no "
                           f"DistributedDataParallel({lacks[0]}) (torch 2.13 has it)")

    def placement(self) -> "Placement":
        """The backend and device this node will use (see ``choose_backend``)."""
        return choose_backend(self.backend, self.device, local_ranks(self.world_size), *visible_gpus())

    def resolved_backend(self) -> str:
        return self.placement().backend

    def iters_for(self, rank: int) -> int:
        """Micro-steps rank ``rank`` has data for (``uneven``)."""
        return self.iters - self.uneven * rank

    def is_sync(self, iteration: int) -> bool:
        """Micro-step ``iteration`` synchronises unless it is a no_sync accumulation step."""
        n = self.no_sync_every
        return n is None or n <= 1 or (iteration + 1) % n == 0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, text: str) -> "RecordConfig":
        return cls(**json.loads(text))


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = RecordConfig()
    p.add_argument("--model", default=d.model,
                   help="zoo model (mlp, convnet, transformer, branchy, shuffled), "
                        "path/to/file.py:factory or package.module:factory")
    p.add_argument("--world-size", type=int, default=d.world_size, help="number of ranks")
    p.add_argument("--iters", type=int, default=d.iters, help="micro-steps per rank")
    p.add_argument("--impl", default=d.impl, choices=IMPLS,
                   help="torch DDP, ddpsim's readable minddp, naive (per-parameter allreduce after "
                        "backward) or overlap (per-parameter allreduce from each gradient's hook)")
    p.add_argument("--bucket-cap-mb", type=float, default=None,
                   help="bucket cap in MiB (default: torch's 25 MiB with a 1 MiB first bucket)")
    p.add_argument("--bucket-cap-mb-list", type=float, nargs="+", default=None, metavar="MIB",
                   help="a cap per bucket in MiB, the first reduced first, the last repeated (torch 2.13's "
                        "bucket_cap_mb_list; replaces --bucket-cap-mb), e.g. 1 5 25")
    p.add_argument("--find-unused-parameters", action="store_true")
    p.add_argument("--static-graph", action="store_true")
    p.add_argument("--gradient-as-bucket-view", action="store_true")
    p.add_argument("--no-broadcast-buffers", dest="broadcast_buffers", action="store_false",
                   help="broadcast_buffers=False: no broadcast of rank 0's buffers before each forward")
    p.add_argument("--skip-all-reduce-unused-params", action="store_true", help="torch 2.13's skip_all_reduce_unused_params")
    p.add_argument("--batched-grad-copy", action="store_true", help="torch 2.13's batched_grad_copy")
    p.add_argument("--no-sync-every", type=int, default=None, metavar="N",
                   help="synchronise every N-th micro-step; the others accumulate under no_sync")
    p.add_argument("--uneven", type=int, default=0, metavar="K",
                   help="uneven inputs: rank r gets K x r fewer batches than rank 0 (the run hangs as DDP "
                        "would, and ddpsim names the rank that ran out of data; add --join for the fix)")
    p.add_argument("--join", action="store_true",
                   help="train inside model.join(): a rank whose data ran out shadows the others' collectives")
    p.add_argument("--no-divide-by-initial-world-size", dest="divide_by_initial_world_size",
                   action="store_false", help="with --join: average over the ranks still training")
    p.add_argument("--batch-size", type=int, default=None, help="samples per rank per micro-step")
    p.add_argument("--seed", type=int, default=d.seed)
    p.add_argument("--backend", default=None, choices=BACKENDS,
                   help="default: nccl when this node has a GPU for every local rank, else gloo")
    p.add_argument("--device", default=None, choices=DEVICES,
                   help="tensor device: cuda lets gloo use GPUs (ranks share them round-robin); "
                        "default cuda with nccl, cpu with gloo")
    p.add_argument("--lr", type=float, default=d.lr, help="SGD learning rate")
    p.add_argument("--timeout", dest="timeout_s", type=float, default=d.timeout_s,
                   help="collective timeout in seconds")
    p.add_argument("--order", default=None, choices=ORDERS + tuple(LEGACY_ORDERS),
                   help="minddp only (not in torch): bucket order torch (torch's: rebuilt in "
                        "gradient-ready order; 'ready' is its old name), reverse or definition "
                        "(fixed layouts, never rebuilt)")
    p.add_argument("--no-profile-internals", dest="profile_internals", action="store_false",
                   help="with --impl torch and --find-unused-parameters or --static-graph, do not run torch's profiler to "
                        "record the graph search and bitmap allreduce (it slows those iterations ~10%%)")
    p.add_argument("--comm-hook", default=None, metavar="NAME",
                   help="register a comm hook on torch's DDP and record it: allreduce, fp16, bf16, powersgd, "
                        "noop, round-robin:N or path/to/file.py:factory (returns (state, hook))")
    p.add_argument("--powersgd-rank", type=int, default=None, metavar="R",
                   help="PowerSGD's matrix_approximation_rank (default: torch's 1)")
    p.add_argument("--powersgd-start-iter", type=int, default=None, metavar="K",
                   help="PowerSGD's start_powerSGD_iter: plain allreduce before it (default: torch's 1000)")
    p.add_argument("--no-pin-cpus", dest="pin_cpus", action="store_false",
                   help="do not pin rank r to CPU r %% ncpus")


def from_args(args: argparse.Namespace) -> RecordConfig:
    fields = RecordConfig.__dataclass_fields__
    return RecordConfig(**{k: v for k, v in vars(args).items() if k in fields}).validate()
