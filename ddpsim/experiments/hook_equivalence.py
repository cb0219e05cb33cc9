"""minddp against torch's DDP with the same communication hook: ``python -m ddpsim.experiments.hook_equivalence``.

For each zoo model, bucket cap and hook (torch's own hook functions, unchanged: ``allreduce_hook``,
``fp16_compress_hook``, ``bf16_compress_hook``, ``powerSGD_hook`` with matrix_approximation_rank 1
and 4 and a fixed seed, ``noop_hook``), each rank trains torch's DDP and minddp from the same
weights on the same batches for ``STEPS`` SGD steps, on real gloo ranks, and reports the largest
|parameter difference|. PowerSGD on gloo with several buckets is refused by minddp with one line
(Note [PowerSGD on gloo with several buckets] in ddpsim/minddp/comm_hook.py): torch's DDP aborts
the process there, so it is not run. Prints a Markdown table (docs/comm-hooks.md).
"""
from __future__ import annotations

import argparse
import sys

MODELS = ("mlp", "convnet", "transformer", "shuffled")
CAPS = (0.05, 64.0)  # several buckets; one bucket for each of these models
HOOKS = ("allreduce", "fp16", "bf16", "powersgd-r1", "powersgd-r4", "noop")
STEPS, BATCH, POWERSGD_START, POWERSGD_SEED = 10, 8, 2, 0


def bf16_hook(state, bucket):
    """torch's ``bf16_compress_hook``, unchanged, under another name: torch's ``_check_comm_hook``
    refuses that name without CUDA + NCCL 2.10 (and minddp mirrors it), yet gloo sums bf16 on CPU."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.bf16_compress_hook(state, bucket)


def make_hook(name: str):
    """(state, hook) for one DDP instance: a fresh state each time (PowerSGD's holds error feedback)."""
    from torch.distributed.algorithms.ddp_comm_hooks import debugging_hooks, default_hooks
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    simple = {"allreduce": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
              "bf16": bf16_hook, "noop": debugging_hooks.noop_hook}
    if name in simple:
        return None, simple[name]
    if not name.startswith("powersgd-r"):
        raise ValueError(f"unknown hook {name!r}: one of {', '.join(HOOKS)}")
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(name[len("powersgd-r"):]),
                                   start_powerSGD_iter=POWERSGD_START, random_seed=POWERSGD_SEED)
    return state, powersgd.powerSGD_hook


def train(impl: str, model: str, cap: float, hook: str, rank: int, world: int):
    """``STEPS`` SGD steps of ``impl`` ("torch" or "minddp") with ``hook``: (parameters, buckets)."""
    import torch

    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload, call_batch

    torch.manual_seed(7)
    w = build_workload(model)
    ddp = torchcompat.torch_ddp(w.model, True, bucket_cap_mb=cap) if impl == "torch" \
        else MinDDP(w.model, bucket_cap_mb=cap)
    ddp.register_comm_hook(*make_hook(hook))
    opt = torch.optim.SGD(w.model.parameters(), lr=0.05)
    for step in range(STEPS):
        inputs, target = call_batch(w, step, rank, world, BATCH)
        opt.zero_grad()
        w.loss(ddp(*inputs), target).backward()
        opt.step()
    n = len(ddp.reducer._get_zeros_like_grad_buckets()) if impl == "torch" else len(ddp.reducer.buckets)
    return [p.detach().clone().double() for p in w.model.parameters()], n


def rank_cases(rank: int, world: int, cases) -> list[dict]:
    """Every (model, cap, hook) case on this rank, minddp first: a refusal skips torch's abort."""
    import torch

    from ddpsim.minddp.comm_hook import PowerSGDOnGlooError

    torch.set_num_threads(1)
    rows = []
    for model, cap, hook in cases:
        row = {"model": model, "cap": cap, "hook": hook}
        try:
            mine, row["buckets"] = train("minddp", model, cap, hook, rank, world)
        except PowerSGDOnGlooError as e:
            rows.append({**row, "buckets": e.buckets, "refused": str(e)})
            continue
        theirs, torch_buckets = train("torch", model, cap, hook, rank, world)
        row["diff"] = max((a - b).abs().max().item() for a, b in zip(theirs, mine))
        row["same_buckets"] = torch_buckets == row["buckets"]
        rows.append(row)
    return rows


def all_cases(models=MODELS, caps=CAPS, hooks=HOOKS):
    return [(m, c, h) for m in models for c in caps for h in hooks]


def run(cases, world: int = 2, timeout: float = 900) -> list[list[dict]]:
    """The cases on ``world`` real gloo ranks: one list of rows per rank."""
    from ddpsim.ranks import run_ranks

    return run_ranks(rank_cases, world, args=(cases,), timeout=timeout)


def format_table(per_rank: list[list[dict]]) -> str:
    """``| model | cap | hook | buckets | max |param difference| rank 0 | rank 1 | ...``."""
    ranks = range(len(per_rank))
    head = ("| model | cap (MiB) | hook | buckets | "
            + " | ".join(f"max \\|param difference\\| rank {r}" for r in ranks) + " |")
    lines = [head, "|" + "---|" * (4 + len(per_rank))]
    for rows in zip(*per_rank):
        first = rows[0]
        if "refused" in first:
            cells = ["refused in one line (torch aborts)"] * len(rows)
        else:
            cells = ["0 (bitwise)" if r["diff"] == 0 else f"{r['diff']:.1e}" for r in rows]
        lines.append(f"| {first['model']} | {first['cap']:g} | {first['hook']} | {first['buckets']} | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.experiments.hook_equivalence", description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--caps", nargs="+", type=float, default=list(CAPS))
    ap.add_argument("--hooks", nargs="+", default=list(HOOKS), choices=HOOKS)
    ap.add_argument("--world-size", type=int, default=2)
    args = ap.parse_args(argv)
    print(format_table(run(all_cases(args.models, args.caps, args.hooks), args.world_size)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
