"""minddp trains exactly like torch DDP, bucket layouts included.

For every zoo model and many DDP configurations (bucket caps tiny / 0.25 MiB /
default / larger than the model at 2 ranks, tiny / default at 4; with and without
``no_sync`` accumulation, branchy with find_unused_parameters, one static_graph run),
5 SGD steps are run with torch DDP and with minddp, in one spawned group of gloo ranks
per world size (configurations loop inside the ranks: a spawn costs seconds).

Checks, per configuration:
- minddp params == torch DDP params (max abs diff <= 1e-6; in practice 0);
- minddp params identical on every rank (bit for bit);
- construction layout (bucket byte sizes) == torch's ``bucket_sizes``; rebuilt
  layout == ``rebuilt_per_bucket_param_indices`` / ``rebuilt_bucket_sizes`` (or
  neither rebuilt);
and per (model, no_sync), against single-process training (see ``reference``):
  assert_close(atol=1e-5, rtol=1e-4) in float32.
Ranks start from different seeds, so the rank-0 broadcast at construction is tested.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

from distutil import run_ranks
from ddpsim import torchcompat

pytest.importorskip("ddpsim.models.zoo_models")

MODELS = ["mlp", "convnet", "transformer", "branchy", "shuffled"]
CAPS = [1e-6, 0.25, None, 1000]  # tiny: every param its own bucket; 1000 MiB > any model
FEWER_CAPS = [1e-6, None]  # the caps trained at 4 ranks
# DDP's mean of per-rank gradients vs one process on the whole batch: the same sums in another
# float32 order. A 16-core H200 host's CPU kernels gave 7.6e-5 on the MLP at 4 ranks (this
# machine's, under 1e-5); a wrong average (a missing division, a lost bucket) is far larger.
REFERENCE_ATOL = 2e-4
STEPS, MICRO, BATCH, LR, SEED = 5, 2, 8, 0.1, 1234


def configs(world_size):
    """(model, bucket_cap_mb, no_sync, find_unused, static_graph); at more than 2 ranks, the caps of
    FEWER_CAPS (every parameter its own bucket, torch's default): bucket layouts do not depend on the
    world size, and each configuration at 4 ranks costs as much as two at 2 on this 2-core machine."""
    out = []
    caps = CAPS if world_size <= 2 else FEWER_CAPS
    for model in MODELS:
        for cap in caps:
            for no_sync in (False, True):
                out.append((model, cap, no_sync, model == "branchy", False))
    out.append(("mlp", None, False, True, False))  # find_unused: first cap, no rebuild
    out.append(("shuffled", None, False, False, True))  # static_graph: rebuild one later
    return out


def _batches(workload, step, rank, world_size, no_sync):
    from ddpsim.models import call_batch

    micro = MICRO if no_sync else 1
    return [call_batch(workload, step * micro + m, rank, world_size, BATCH) for m in range(micro)]


def train(impl, cfg, rank, world_size):
    """5 SGD steps with ``impl`` ('torch' or 'minddp'); returns (ddp, params)."""
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload

    model_name, cap, no_sync, find_unused, static = cfg
    torch.manual_seed(SEED + rank)  # different per rank: construction must broadcast
    w = build_workload(model_name)
    cls = nn.parallel.DistributedDataParallel if impl == "torch" else MinDDP
    ddp = cls(w.model, bucket_cap_mb=cap, find_unused_parameters=find_unused,
              static_graph=static)
    construction = _layout(ddp) if impl == "minddp" else None
    opt = torch.optim.SGD(w.model.parameters(), lr=LR)
    for step in range(STEPS):
        opt.zero_grad()
        batches = _batches(w, step, rank, world_size, no_sync)
        for m, (inputs, target) in enumerate(batches):
            if m < len(batches) - 1:
                with ddp.no_sync():
                    w.loss(ddp(*inputs), target).backward()
            else:
                w.loss(ddp(*inputs), target).backward()
        opt.step()
    params = [p.detach().clone() for p in w.model.parameters()]
    return ddp, params, construction


def _layout(ddp):
    return [(b.variable_indices, b.nbytes) for b in ddp.reducer.buckets]


def _torch_layouts(ddp):
    d = torchcompat.ddp_logging_data(ddp)
    sizes = [int(s) for s in d["bucket_sizes"].split(", ")]
    rebuilt = None
    if d.get("has_rebuilt_buckets"):
        idx = [[int(i) for i in b.split()] for b in d["rebuilt_per_bucket_param_indices"].split(", ")]
        rsizes = [int(s) for s in d["rebuilt_bucket_sizes"].split(", ")]
        rebuilt = list(zip(idx, rsizes))
    return sizes, rebuilt


def reference(cfg, world_size):
    """Single-process training on all ranks' batches.

    mlp / shuffled / transformer: literally the concatenated batch (and the
    micro-batches of a no_sync step accumulate). convnet (BatchNorm: statistics per
    rank's batch) and branchy (a per-rank branch flag) cannot be concatenated: each
    rank's batch is forwarded separately, its gradients accumulated over the
    micro-batches, then the per-rank gradients are averaged, in the same order as
    DDP adds them (convnet's BatchNorm amplifies a 1e-8 change of summation order
    to ~1e-3 within 5 steps, so the order matters there). Only rank 0's forward
    may update buffers (DDP broadcasts rank 0's buffers).
    """
    from ddpsim.models import build_workload

    model_name, _, no_sync, _, _ = cfg
    torch.manual_seed(SEED)  # rank 0's initial weights
    w = build_workload(model_name)
    opt = torch.optim.SGD(w.model.parameters(), lr=LR)
    for step in range(STEPS):
        ranks = [_batches(w, step, r, world_size, no_sync) for r in range(world_size)]
        if model_name in ("convnet", "branchy"):
            _per_rank_grads(w, ranks)
        else:
            opt.zero_grad()
            for m in range(len(ranks[0])):
                inputs = tuple(torch.cat([ranks[r][m][0][k] for r in range(world_size)])
                               for k in range(len(ranks[0][m][0])))
                target = torch.cat([ranks[r][m][1] for r in range(world_size)])
                w.loss(w.model(*inputs), target).backward()
        opt.step()
    return [p.detach() for p in w.model.parameters()]


def _per_rank_grads(w, ranks):
    params, total = list(w.model.parameters()), None
    for r, micro in enumerate(ranks):
        saved = [b.clone() for b in w.model.buffers()] if r else []
        for p in params:
            p.grad = None
        for inputs, target in micro:
            w.loss(w.model(*inputs), target).backward()
        for b, s in zip(w.model.buffers(), saved):
            b.copy_(s)
        grads = [p.grad * (1.0 / len(ranks)) if p.grad is not None else torch.zeros_like(p)
                 for p in params]
        total = grads if total is None else [t + g for t, g in zip(total, grads)]
    for p, g in zip(params, total):
        p.grad = g


def _has_reference(cfg, world_size):
    """convnet at 4 ranks: no. gloo sums 4 ranks' gradients in its own order, and
    BatchNorm on 8-sample batches turns that 1e-8 difference into ~1e-3 within 5
    steps; torch DDP and minddp still agree exactly, and 2 ranks are checked."""
    return not (world_size > 2 and cfg[0] == "convnet")


def rank_main(rank, world_size):
    torch.set_num_threads(1)
    results, ref_jobs = [], {}
    for cfg in configs(world_size):
        tddp, tparams, _ = train("torch", cfg, rank, world_size)
        mddp, mparams, construction = train("minddp", cfg, rank, world_size)
        flat = torch.cat([p.flatten() for p in mparams])
        rank0 = flat.clone()
        dist.broadcast(rank0, 0)
        sizes, rebuilt = _torch_layouts(tddp)
        mine_rebuilt = _layout(mddp) if mddp.reducer.has_rebuilt_bucket else None
        results.append({
            "cfg": cfg,
            "vs_torch": max((a - b).abs().max().item() for a, b in zip(mparams, tparams)),
            "vs_rank0": (flat - rank0).abs().max().item(),
            "construction": ([s for _, s in construction], sizes),
            "rebuilt": (mine_rebuilt, rebuilt),
        })
        key = (cfg[0], cfg[2])
        if key not in ref_jobs and _has_reference(cfg, world_size):
            ref_jobs[key] = (cfg, mparams)
        del tddp, mddp
    refs = []
    for j, (key, (cfg, mparams)) in enumerate(sorted(ref_jobs.items())):
        if j % world_size == rank:  # share the single-process references among ranks
            ref = reference(cfg, world_size)
            refs.append((cfg, max((a - b).abs().max().item() for a, b in zip(mparams, ref)),
                         all(torch.allclose(a, b, atol=REFERENCE_ATOL, rtol=1e-4)
                             for a, b in zip(mparams, ref))))
    return results, refs


def _check(world_size):
    per_rank = run_ranks(rank_main, world_size, timeout=900)
    for rank, (results, _) in enumerate(per_rank):
        for r in results:
            cfg = r["cfg"]
            assert r["vs_torch"] <= 1e-6, (rank, cfg, r["vs_torch"])
            assert r["vs_rank0"] == 0, (rank, cfg, r["vs_rank0"])
            assert r["construction"][0] == r["construction"][1], (cfg, r["construction"])
            assert r["rebuilt"][0] == r["rebuilt"][1], (cfg, r["rebuilt"])
    refs = [x for _, rs in per_rank for x in rs]
    assert len(refs) == len({(c[0], c[2]) for c in configs(world_size)
                             if _has_reference(c, world_size)})
    for cfg, diff, ok in refs:
        assert ok, (cfg, diff)


@pytest.mark.slow  # real gloo ranks training torch DDP and minddp
def test_minddp_matches_torch_ddp_world_size_2():
    _check(2)


@pytest.mark.slow  # real gloo ranks training torch DDP and minddp
def test_minddp_matches_torch_ddp_world_size_4():
    _check(4)
