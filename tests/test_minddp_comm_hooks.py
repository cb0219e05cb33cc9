"""Communication hooks in minddp (ddpsim/minddp/comm_hook.py) against torch's DDP, on real gloo ranks.

torch's own hook functions run unchanged on both DDPs (ddpsim.experiments.hook_equivalence, the
table of docs/comm-hooks.md); registration errors are compared message for message with torch's;
Join with a hook is in tests/test_join.py.
"""
import pytest
import torch

from distutil import run_ranks


@pytest.fixture(scope="module")
def equivalence():
    """Every (model, cap, hook) case of the experiment, 10 steps each, on 2 gloo ranks (one run)."""
    from ddpsim.experiments import hook_equivalence as he

    return he.run(he.all_cases(), world=2, timeout=600)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "convnet", "transformer", "shuffled"])
def test_torch_hooks_train_minddp_like_torch_ddp(equivalence, model):
    for rank, rows in enumerate(equivalence):
        mine = [r for r in rows if r["model"] == model]
        assert len(mine) == 12, mine
        for r in mine:
            case = f"rank {rank} {r['model']} cap {r['cap']} {r['hook']}"
            powersgd = r["hook"].startswith("powersgd")
            if powersgd and r["buckets"] > 1:  # Note [PowerSGD on gloo with several buckets]
                assert "refused" in r and "\n" not in r["refused"], case
                assert "gloo" in r["refused"] and "one bucket" in r["refused"], case
                continue
            assert "refused" not in r and r["same_buckets"], case
            if powersgd:
                assert r["diff"] <= 1e-6, f"{case}: {r['diff']:.2e}"
            else:
                assert r["diff"] == 0, f"{case}: {r['diff']:.2e} (torch's DDP is bitwise here)"
        assert {r["buckets"] for r in mine if r["cap"] == 64.0} == {1}, "PowerSGD must run somewhere"
        assert min(r["buckets"] for r in mine) < max(r["buckets"] for r in mine)


def _registration_errors(rank, world):
    """Each bad registration on torch's DDP and on minddp: {case: ((type, message), (type, message))}."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP

    torch.set_num_threads(1)

    def bucket_int(state, bucket: int): ...

    def returns_list(state, bucket) -> list: ...

    cases = {"twice": [default_hooks.allreduce_hook, default_hooks.allreduce_hook], "not callable": [3],
             "bucket annotation": [bucket_int], "return annotation": [returns_list],
             "bf16 without CUDA": [default_hooks.bf16_compress_hook]}
    out = {}
    for case, hooks in cases.items():
        out[case] = []
        for make in (lambda m: torchcompat.torch_ddp(m, True), MinDDP):
            ddp = make(torch.nn.Linear(4, 3))
            try:
                for hook in hooks:
                    ddp.register_comm_hook(None, hook)
                out[case].append(None)
            except Exception as e:  # noqa: BLE001 - the error itself is what is compared
                out[case].append((type(e).__name__, str(e)))
    return out


@pytest.mark.slow
def test_registration_errors_are_torchs():
    out = run_ranks(_registration_errors, 1, timeout=120)[0]
    for case, (theirs, mine) in out.items():
        if case == "bf16 without CUDA" and theirs is None:  # a CUDA build of torch (run on a CPU) takes it
            assert mine is None, f"{case}: torch accepts it, minddp {mine}"
            continue
        assert theirs is not None and mine == theirs, f"{case}: torch {theirs}, minddp {mine}"
        assert "\n" not in mine[1]
    assert out["twice"][1] == ("RuntimeError", "register_comm_hook or register_builtin_comm_hook can only be called once.")


def _late_and_bad_hooks(rank, world):
    """A hook registered after the first iteration (torch allows it), and hooks that return garbage."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.minddp.comm_hook import CommHookError

    torch.set_num_threads(1)
    late = {}
    for impl, hook in [(i, h) for i in ("torch", "minddp") for h in ("fp16", "new tensor")]:
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 3)
        ddp = torchcompat.torch_ddp(m, True) if impl == "torch" else MinDDP(m)
        x = torch.full((2, 4), float(rank + 1))
        ddp(x).sum().backward()
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook if hook == "fp16" else _mean_in_new_tensor)
        m.zero_grad()
        ddp(x * 1.001).sum().backward()
        late[impl, hook] = (str(m.weight.grad.dtype), m.weight.grad.tolist())  # lists: tensors do not outlive the rank
    bad = {}
    for name, hook in {"not a future": lambda state, bucket: bucket.buffer(),
                       "wrong size": lambda state, bucket: _done(bucket.buffer()[:1]),
                       "no bucket parameter": lambda state, grads: _done(grads.buffer())}.items():
        ddp = MinDDP(torch.nn.Linear(4, 3))
        try:
            ddp.register_comm_hook(None, hook)
            ddp(torch.ones(2, 4)).sum().backward()
            bad[name] = None
        except (CommHookError, TypeError) as e:
            bad[name] = str(e)
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd

    two_layers = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    ddp = MinDDP(two_layers, bucket_cap_mb=0.01, find_unused_parameters=True)  # several buckets at once
    try:
        ddp.register_comm_hook(powersgd.PowerSGDState(None), powersgd.powerSGD_hook)
        bad["powersgd at registration"] = None
    except CommHookError as e:
        bad["powersgd at registration"] = f"{len(ddp.reducer.buckets)}: {e}"
    return late, bad


def _mean_in_new_tensor(state, bucket):
    """The mean in a tensor that is not the bucket: the reducer must copy it back (finalize_backward)."""
    import torch.distributed as dist

    mean = bucket.buffer() * (1.0 / dist.get_world_size())
    return dist.all_reduce(mean, async_op=True).get_future().then(lambda fut: fut.value()[0])


def _done(tensor):
    fut = torch.futures.Future()
    fut.set_result(tensor)
    return fut


@pytest.mark.slow
def test_late_registration_like_torch_and_bad_hooks_in_one_line():
    for late, bad in run_ranks(_late_and_bad_hooks, 2, timeout=120):
        for hook in ("fp16", "new tensor"):
            assert late["torch", hook] == late["minddp", hook], hook
            assert late["torch", hook][0] == "torch.float32" and any(v != 0 for row in late["torch", hook][1] for v in row)
        assert late["torch", "fp16"] != late["torch", "new tensor"]  # the fp16 hook rounds: it did run
        for name, message in bad.items():
            assert message is not None and "\n" not in message, name
        assert "torch.futures.Future" in bad["not a future"]
        assert "1 elements" in bad["wrong size"] and "'bucket'" in bad["no bucket parameter"]
        n, message = bad["powersgd at registration"].split(": ", 1)
        assert int(n) > 1 and message.startswith(f"powerSGD_hook on gloo with {n} buckets")


def test_grad_bucket_has_torchs_methods():
    from ddpsim.minddp import GradBucket
    from ddpsim.minddp.buckets import make_bucket
    from ddpsim.minddp.comm_hook import make_grad_bucket

    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(4))]
    bucket = make_bucket(0, [1, 0], 1 << 20, params)
    bucket.gradients.copy_(torch.arange(10.0))
    gb = make_grad_bucket(1, 2, bucket, params)
    assert isinstance(gb, GradBucket) and gb.index() == 1 and gb.is_last()
    assert gb.buffer() is bucket.gradients
    assert [g.shape for g in gb.gradients()] == [(4,), (2, 3)]
    assert gb.gradients()[1].flatten().tolist() == list(range(4, 10))
    assert gb.parameters()[0] is params[1]
    gb.gradients()[0].zero_()  # views: a hook writing into them writes the bucket
    assert bucket.gradients[:4].sum() == 0
    gb.set_buffer(torch.ones(10))
    assert gb.gradients()[1].sum() == 6 and bucket.gradients[4:].sum() == sum(range(4, 10))
    assert not make_grad_bucket(0, 2, bucket, params).is_last()


def _what_hooks_see(rank, world):
    """Each GradBucket a hook is given, per iteration, by torch's DDP and by minddp."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    from ddpsim import torchcompat
    from ddpsim.minddp import DistributedDataParallel as MinDDP
    from ddpsim.models import build_workload, call_batch

    torch.set_num_threads(1)
    out = {}
    for impl, opts in [(i, o) for i in ("torch", "minddp") for o in (
            dict(static_graph=True, find_unused_parameters=True), dict(find_unused_parameters=True), {})]:
        seen = []

        def hook(state, bucket):
            seen.append((bucket.index(), bucket.is_last(), [tuple(g.shape) for g in bucket.gradients()],
                         [tuple(p.shape) for p in bucket.parameters()], bucket.buffer().numel()))
            return default_hooks.allreduce_hook(state, bucket)
        torch.manual_seed(0)
        w = build_workload("mlp")
        ddp = torchcompat.torch_ddp(w.model, True, bucket_cap_mb=0.05, **opts) if impl == "torch" \
            else MinDDP(w.model, bucket_cap_mb=0.05, **opts)
        ddp.register_comm_hook(None, hook)
        for step in range(3):
            inputs, target = call_batch(w, step, rank, world, 8)
            w.loss(ddp(*inputs), target).backward()
            seen.append("end of backward")
        out[impl, tuple(opts)] = seen
    return out


@pytest.mark.slow
def test_hooks_see_the_buckets_torch_gives_them():
    for out in run_ranks(_what_hooks_see, 2, timeout=120):
        for (impl, opts), seen in out.items():
            if impl == "minddp":
                assert seen == out["torch", opts], opts
                assert sum(1 for s in seen if s != "end of backward" and s[1]) == 3  # one last bucket each
