"""minddp against torch's DDP with torch's comm hooks on NCCL, on a GPU: ``python benchmarks/gpu_hook_equivalence.py``.

One rank (world size 1, GPU 0): NCCL needs a GPU per rank, so a one-GPU machine checks the hook
path on CUDA tensors and NCCL (including PowerSGD with several buckets, which torch's hook cannot
run on gloo), not the ordering across ranks. Each line: the buckets torch and minddp used and the
largest |parameter difference| after 10 SGD steps from the same weights. Run by
benchmarks/gpu_acceptance.sh; the results are in docs/comm-hooks.md.
"""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch, torch.distributed as dist
from ddpsim.record.launcher import pick_port
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(pick_port()), RANK="0", WORLD_SIZE="1")
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1)
from ddpsim.experiments.hook_equivalence import make_hook
from ddpsim.minddp import DistributedDataParallel as MinDDP
from ddpsim.models import build_workload, call_batch
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
dev = torch.device("cuda", 0)

def train(impl, model, cap, hook):
    torch.manual_seed(7)
    w = build_workload(model); m = w.model.to(dev)
    ddp = (torch.nn.parallel.DistributedDataParallel(m, device_ids=[0], bucket_cap_mb=cap) if impl == "torch"
           else MinDDP(m, bucket_cap_mb=cap))
    if hook == "bf16-native":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    else:
        ddp.register_comm_hook(*make_hook(hook))
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for step in range(10):
        x, y = call_batch(w, step, 0, 1, 8)
        x = tuple(t.to(dev) for t in x); y = y.to(dev)
        opt.zero_grad(); w.loss(ddp(*x), y).backward(); opt.step()
    n = len(ddp.reducer._get_zeros_like_grad_buckets()) if impl == "torch" else len(ddp.reducer.buckets)
    return [p.detach().double().cpu() for p in m.parameters()], n

print("| model | cap MiB | hook | buckets torch / minddp | max abs param difference |")
for model in ("mlp", "transformer"):
    for cap in (0.05, 64.0):
        for hook in ("allreduce", "fp16", "bf16-native", "powersgd-r1", "powersgd-r4", "noop"):
            try:
                a, na = train("torch", model, cap, hook); b, nb = train("minddp", model, cap, hook)
                d = max((x - y).abs().max().item() for x, y in zip(a, b))
                print(f"| {model} | {cap:g} | {hook} | {na} / {nb} | {d:.1e} |", flush=True)
            except Exception as e:
                print(f"| {model} | {cap:g} | {hook} | error | {type(e).__name__}: {str(e)[:120]} |", flush=True)
dist.destroy_process_group()
