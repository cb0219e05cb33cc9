"""The part 2 harness's own clock on a student's DDP: it does not read what the student reports.

``OverlapProbe`` is installed on a rank *before* the student's ``BucketedDDP`` is built:

- **gradient readiness**: its own ``register_post_accumulate_grad_hook`` on every parameter DDP
  reduces. Registered first, it runs before the student's hook for the same parameter, so its
  time is the moment the gradient was accumulated, whatever the student's hook then does.
- **collectives**: it replaces ``torch.distributed.all_reduce`` with a wrapper that stamps the
  call (the launch) and the end of the allreduce: for ``async_op=True`` the earliest of the Work's
  future completing (a ``then`` callback, run by gloo's thread when the result lands; the
  student's ``get_future()`` is chained after it) and any ``wait()`` on the returned Work
  returning; for a blocking call, its return.

``analyse`` (pure, testable on hand-made numbers) turns one iteration's stamps into the three
facts the autograder grades: which buckets of DDP's layout were allreduced (boundaries), in which
order, and how many allreduces had a later gradient become ready while they were in flight
(overlap). Note [Measured overlap]: a bucket "overlapped" when at least one gradient became
ready strictly between its allreduce's launch and its end, i.e. backward kept computing while
the bucket was on the wire. Waiting on the allreduce inside the hook, or launching after
backward, gives 0 by construction; only a bucket that, launched in order, can start before the
iteration's last gradient (it and every earlier bucket full by then) can overlap at all
("could overlap"); the harness computes that from its own stamps and DDP's layout.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

_ALL_REDUCE_HOMES = (dist, c10d)


def _now() -> int:
    return time.perf_counter_ns()


@dataclass
class Collective:
    """One call of ``dist.all_reduce`` seen by the probe; times in ns (perf_counter)."""
    numel: int
    start: int
    end: int | None = None

    def done(self) -> None:
        t = _now()
        self.end = t if self.end is None else min(self.end, t)


class _TimedWork:
    """The Work the student gets back: the real one, with ``wait()`` stamped, and whose
    ``get_future()`` is the real future chained through the probe's stamp (a real
    ``torch.futures.Future`` with the same value). Note: a torch Future wakes its waiters
    *before* it runs its callbacks, so a student waiting on the raw future could run on before
    a callback on it stamps the end; waiting on the chained future cannot."""

    def __init__(self, work, collective: Collective):
        self._work, self._collective = work, collective

        def stamp(fut):
            collective.done()
            return fut.value()  # re-raises the allreduce's error, if any
        self._future = work.get_future().then(stamp)

    def wait(self, *args, **kwargs):
        out = self._work.wait(*args, **kwargs)
        self._collective.done()
        return out

    def get_future(self):
        return self._future

    def __getattr__(self, name):  # is_completed, exception, ...: the real Work's
        return getattr(self._work, name)


@dataclass
class IterationStamps:
    grads: list[tuple[int, int]] = field(default_factory=list)  # (t_ns, param index)
    collectives: list[Collective] = field(default_factory=list)  # in call order

    def to_dict(self) -> dict:
        return {"grads": self.grads,
                "collectives": [(c.numel, c.start, c.end) for c in self.collectives]}


class OverlapProbe:
    """Stamps gradient readiness and allreduce spans per iteration (see the module docstring)."""

    def __init__(self, params):
        self.params = list(params)
        self.current: IterationStamps | None = None
        self.iterations: list[IterationStamps] = []
        self._real_all_reduce = None
        self._hooks = []

    def install(self) -> "OverlapProbe":
        self._hooks = [p.register_post_accumulate_grad_hook(lambda p, i=i: self._grad(i))
                       for i, p in enumerate(self.params)]
        self._real_all_reduce = dist.all_reduce
        for module in _ALL_REDUCE_HOMES:  # torch.distributed re-exports distributed_c10d's
            module.all_reduce = self._all_reduce
        return self

    def uninstall(self) -> None:
        for h in self._hooks:
            h.remove()
        if self._real_all_reduce is not None:
            for module in _ALL_REDUCE_HOMES:
                module.all_reduce = self._real_all_reduce

    def begin_iteration(self) -> None:
        self.current = IterationStamps()

    def end_iteration(self) -> None:
        self.iterations.append(self.current)
        self.current = None

    def _grad(self, index: int) -> None:
        if self.current is not None:
            self.current.grads.append((_now(), index))

    def _all_reduce(self, tensor, *args, **kwargs):
        async_op = kwargs.get("async_op", args[2] if len(args) > 2 else False)
        c = Collective(tensor.numel(), _now())
        if self.current is not None:
            self.current.collectives.append(c)
        work = self._real_all_reduce(tensor, *args, **kwargs)
        if not async_op or work is None:
            c.done()
            return work
        return _TimedWork(work, c)


def expected_buckets(params, bucket_cap_bytes: int) -> list[list[int]]:
    """DDP's construction layout: buckets by size in definition order, reversed (bucket 0 holds
    the last-defined parameters). Computed by the harness, not taken from the student."""
    from ddpsim.minddp import compute_bucket_assignment_by_size

    groups, _ = compute_bucket_assignment_by_size(list(params), [int(bucket_cap_bytes)])
    return [list(g) for g in reversed(groups)]


@dataclass
class IterationVerdict:
    sizes_ok: bool  # the allreduced sizes are exactly DDP's buckets, each once
    order: list[int | None]  # the bucket each collective matched, in launch order (None: no match)
    overlapped: int  # buckets with a gradient ready strictly inside their allreduce span
    could_overlap: int  # buckets that an in-order launch can start before the last gradient
    launched_before_last_grad: int


def analyse(stamps: dict, buckets: list[list[int]], numels: list[int]) -> IterationVerdict:
    """One iteration of one rank: ``stamps`` from ``IterationStamps.to_dict``, ``buckets`` the
    expected layout (param indices), ``numels[i]`` parameter i's element count."""
    sizes = [sum(numels[i] for i in b) for b in buckets]
    by_size = {s: k for k, s in enumerate(sizes)}  # the harness's model has distinct sizes
    colls = sorted(stamps["collectives"], key=lambda c: c[1])
    order = [by_size.get(n) for n, _, _ in colls]
    sizes_ok = sorted(n for n, _, _ in colls) == sorted(sizes)
    ready = {i: t for t, i in stamps["grads"]}
    last = max(ready.values(), default=0)
    could, full_at = 0, 0  # bucket k can launch once buckets 0..k are full (in-order launch)
    for b in buckets:
        if not all(i in ready for i in b):
            break
        full_at = max([full_at] + [ready[i] for i in b])
        could += full_at < last
    grad_times = sorted(ready.values())
    overlapped = sum(1 for _, s, e in colls if e is not None and any(s < t < e for t in grad_times))
    overlapped = min(overlapped, could)  # extra collectives (wrong boundaries) add nothing
    before = sum(1 for _, s, _ in colls if s < last)
    return IterationVerdict(sizes_ok, order, overlapped, could, before)
