"""A user's comm hook for ``record --comm-hook tests/comm_hook_user.py:factory`` (tests/test_record_comm_hooks.py).

It averages each bucket in two allreduces, one per half, then waits for both: two collectives per
bucket whose bytes add up to the bucket's, and the same gradients as torch's allreduce_hook.
"""
import torch
import torch.distributed as dist


def halves_hook(state, bucket):
    buffer = bucket.buffer()
    buffer.div_(dist.get_world_size())
    half = buffer.numel() // 2
    futures = [dist.all_reduce(part, async_op=True).get_future() for part in (buffer[:half], buffer[half:])]
    state["calls"] += 1
    return torch.futures.collect_all(futures).then(lambda _fut: buffer)


def factory():
    return {"calls": 0}, halves_hook


def not_a_pair():
    return halves_hook
