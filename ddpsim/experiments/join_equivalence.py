"""minddp's Join against torch's: ``python -m ddpsim.experiments.join_equivalence``.

Real gloo ranks, rank r with ``STEPS - SKEW * r`` batches; torch's DDP and minddp each train the
same model from the same seed inside ``model.join()``. Per case and rank: the largest difference
between their parameters and buffers, and the number of zero-filled bucket allreduces each issued
as a joined rank (torch's counted by wrapping ``_match_all_reduce_for_bwd_pass``). Asserted by
``tests/test_join.py``; the table is in ``docs/join.md``.
"""
from __future__ import annotations

import argparse
import sys

STEPS, SKEW, WORLD = 10, 3, 3  # rank r runs STEPS - SKEW * r batches
CASES = (("mlp", True, 0.05, False, None), ("mlp", False, 0.05, False, None), ("convnet", True, None, False, None),
         ("branchy", True, 0.01, True, None), ("mlp", False, 0.05, False, "fp16"),
         ("transformer", True, 0.05, False, "allreduce"))
# model, divide_by_initial_world_size, bucket_cap_mb, find_unused, comm hook (hook_equivalence's names; None: none)


def train_joined(rank, world, model_name, divide_initial, cap_mb, find_unused, hook=None):
    """torch's DDP and minddp, each under ``join()``, with torch's comm hook ``hook`` if given:
    (max |difference|, {impl: shadow allreduces})."""
    import torch

    from ddpsim import torchcompat
    from ddpsim.experiments.hook_equivalence import make_hook
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload, call_batch

    torch.set_num_threads(1)
    out, shadows = {}, {}
    for impl in ("torch", "minddp"):
        torch.manual_seed(7)
        w = build_workload(model_name)
        opts = dict(bucket_cap_mb=cap_mb, find_unused_parameters=find_unused)
        ddp = torchcompat.torch_ddp(w.model, True, **opts) if impl == "torch" else MinDDP(w.model, **opts)
        if hook:  # a joined rank shadows through the hook too (``_run_comm_hook`` on zeros)
            ddp.register_comm_hook(*make_hook(hook))
        count = torchcompat.count_join_shadows(ddp)
        # weight decay acts on a zero gradient, not on none: Join's used-parameter map decides which
        opt = torch.optim.SGD(w.model.parameters(), lr=0.05, weight_decay=0.1)
        with ddp.join(divide_by_initial_world_size=divide_initial):
            for step in range(STEPS - SKEW * rank):
                inputs, target = call_batch(w, step, rank, world, 8)
                opt.zero_grad()
                w.loss(ddp(*inputs), target).backward()
                opt.step()
        out[impl] = [t.detach().clone().double() for t in (*w.model.parameters(), *w.model.buffers())]
        shadows[impl] = count()
    diff = max((a - b).abs().max().item() for a, b in zip(out["torch"], out["minddp"]))
    return diff, shadows


def run_case(case) -> list[tuple[float, dict]]:
    """One case on ``WORLD`` real ranks: per rank (max |difference|, shadow allreduces)."""
    from ddpsim.ranks import run_ranks

    return run_ranks(train_joined, WORLD, args=case, timeout=300)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ddpsim.experiments.join_equivalence", description=__doc__.splitlines()[0])
    ap.parse_args(argv)  # no options: --help, and a clear error on anything else
    print("| model | divide_by_initial_world_size | bucket cap MiB | find_unused | comm hook | rank | batches | "
          "max abs difference | shadow allreduces torch / minddp |\n|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        for rank, (diff, shadows) in enumerate(run_case(case)):
            model, divide, cap, unused, hook = case
            print(f"| {model} | {divide} | {cap or 'default'} | {unused} | {hook or '-'} | {rank} | "
                  f"{STEPS - SKEW * rank} | {diff:.1e} | {shadows['torch']} / {shadows['minddp']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
