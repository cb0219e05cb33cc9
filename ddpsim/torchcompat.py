"""The one place where ddpsim touches torch's private or version-dependent APIs.

Every use of a private torch attribute or function (names starting with ``_``), or of behaviour
that changed between torch releases, goes through a function in this module, so that a new torch
release needs checking in one file. Each function says which torch versions it was checked on and
what it falls back to when the private API is missing.

"Checked" means: read in that release's sources (torch/nn/parallel/distributed.py,
torch/distributed/__init__.py) or run here: the whole test suite on every release in ``TESTED``
(docs/torch-matrix.md, written by benchmarks/torch_matrix.py, 2026-11-26). A missing attribute never raises: the function falls back to public
behaviour, or returns None, which callers show as "unknown".
"""
from __future__ import annotations

import contextlib
import importlib
import inspect
import sys
import warnings
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

# The releases whose whole test suite passed (docs/torch-matrix.md, benchmarks/torch_matrix.py);
# any other prints one warning line and runs.
TESTED = ((2, 4), (2, 6), (2, 8), (2, 10), (2, 11), (2, 13), (2, 14))
SUPPORTED = ((2, 4), (2, 14))  # oldest and newest of TESTED (major, minor)
MIB = 1024 * 1024
# What a rank forked from a server that imported torch would otherwise import itself, 2 CPU-seconds
# each here (Note [Ranks forked from a server that imported torch] in ddpsim/ranks.py): DDP's
# constructor imports torch._dynamo (distributed.py asks ``torch._dynamo.utils`` for its
# optimize_ddp mode; 2.0 s of a 2-rank recording's 4.0 s, 2.13). A name a release lacks is
# skipped: multiprocessing's forkserver passes over a preload that raises ImportError.
RANK_PRELOAD = ("torch", "torch.distributed", "torch._dynamo")
# torch.distributed._DEFAULT_FIRST_BUCKET_BYTES: 1 MiB in every release 1.10 - 2.14.
DEFAULT_FIRST_BUCKET_BYTES = int(getattr(dist, "_DEFAULT_FIRST_BUCKET_BYTES", MIB))


def torch_version(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of ``torch.__version__`` (or of ``version``): "2.11.0+cu130" -> (2, 11)."""
    text = (version or torch.__version__).split("+")[0]
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (2 - len(parts)))  # type: ignore[return-value]


def version_warning(version: str | None = None) -> str | None:
    """One line when torch is not a release the test suite ran on (``TESTED``), else None."""
    got = torch_version(version)
    if got in TESTED:
        return None
    lo, hi = SUPPORTED
    where = "inside the range but not a release" if lo <= got <= hi else "outside the range"
    tested = ", ".join(f"{a}.{b}" for a, b in TESTED)
    return (f"ddpsim: warning: torch {version or torch.__version__} is {where} ddpsim was "
            f"tested on ({lo[0]}.{lo[1]} to {hi[0]}.{hi[1]}: {tested}; docs/torch-matrix.md); private APIs "
            f"fall back to public behaviour and some fields may read 'unknown'")


_warned = []


def warn_if_unsupported() -> None:
    """Print ``version_warning`` once per process, to stderr."""
    line = version_warning()
    if line and not _warned:
        _warned.append(line)
        print(line, file=sys.stderr)


# ----------------------------------------------------------------------------- bucket sizes


def compute_bucket_assignment_by_size(tensors, size_limits, expect_sparse_gradient=None,
                                      tensor_indices=None):
    """torch's own ``dist._compute_bucket_assignment_by_size`` -> (bucket_indices, per_bucket_limits).

    Checked on 2.4 - 2.14 (the same 4-argument signature since 1.10). Returns None when this
    torch has no such function, so callers can say "unknown" instead of guessing.
    """
    fn = getattr(dist, "_compute_bucket_assignment_by_size", None)
    if fn is None:
        return None
    sparse = list(expect_sparse_gradient) if expect_sparse_gradient is not None else []
    if tensor_indices is None:
        buckets, limits = fn(list(tensors), list(size_limits), sparse)
    else:
        buckets, limits = fn(list(tensors), list(size_limits), sparse, list(tensor_indices))
    return [list(b) for b in buckets], list(limits)  # a tuple, like torch's


@dataclass
class BucketCaps:
    """The size limits a torch DDP object builds its buckets under (bytes)."""

    bucket_bytes: int | None  # the cap of every bucket but the first; None: unknown
    first_candidates: list[int]  # the first (soonest-reduced) bucket's cap: the likely ones, best first
    source: str  # where these came from: "_bucket_config", "bucket_bytes_cap" or "unknown"
    per_bucket: list[int] = field(default_factory=list)  # bucket_cap_mb_list in bytes (2.13); []: none

    def construction_limits(self, static_graph: bool, find_unused: bool) -> list[list[int]] | None:
        """Candidate ``bucket_size_limits`` of ``_ddp_init_helper`` (before its reversal)."""
        if self.per_bucket:  # bucket_cap_mb_list: in every mode (2.13's compute_bucket_size_limits)
            return [list(self.per_bucket)]
        if self.bucket_bytes is None:
            return None
        if static_graph or not find_unused:
            return [[sys.maxsize]]  # one bucket until the rebuild (every release checked)
        out = []
        for first in self.first_candidates:
            limits = [first, self.bucket_bytes] if first < self.bucket_bytes else [self.bucket_bytes]
            if limits not in out:
                out.append(limits)
        return out

    def rebuild_limits(self) -> list[list[int]] | None:
        """Candidate limits of ``Reducer::rebuild_buckets``: bucket_cap_mb_list's, else [first cap, cap];
        a negative cap (taken without find_unused_parameters) as sys.maxsize: reducer.cpp reads it as
        size_t, 2^64 - |cap| (Note [Caps torch takes] in ddpsim/buckets.py)."""
        if self.per_bucket:
            candidates = [list(self.per_bucket)]
        elif self.bucket_bytes is None:
            return None
        else:
            candidates = [[first, self.bucket_bytes] for first in self.first_candidates]
        return [[sys.maxsize if c < 0 else c for c in limits] for limits in candidates]


def bucket_caps(ddp) -> BucketCaps:
    """Read a torch DDP object's bucket caps, whatever its release.

    - 2.13 (and 2.12's ``_BucketCapacityConfig``): ``ddp._bucket_config`` with
      ``bucket_bytes_cap`` and ``first_bucket_bytes_cap``.
    - 2.4 - 2.11: ``ddp.bucket_bytes_cap`` and ``ddp.bucket_bytes_cap_default``; the reducer's first
      cap is ``_DEFAULT_FIRST_BUCKET_BYTES`` if the default was kept, else ``bucket_bytes_cap``.
    - older: ``bucket_bytes_cap`` only, and the first cap was always ``_DEFAULT_FIRST_BUCKET_BYTES``.
    Where the first cap is not certain, both candidates are given; ``layout_caps`` keeps the one
    that reproduces the buckets seen. bucket_cap_mb_list (2.13): ``_bucket_config.per_bucket_bytes_caps``,
    also ``ddp.bucket_bytes_cap_list``.
    """
    cfg = getattr(ddp, "_bucket_config", None)
    cap = getattr(cfg, "bucket_bytes_cap", None)
    first = getattr(cfg, "first_bucket_bytes_cap", None)
    per_bucket = getattr(cfg, "per_bucket_bytes_caps", None) or getattr(ddp, "bucket_bytes_cap_list", None)
    per_bucket = [int(c) for c in per_bucket or []]
    if isinstance(cap, int) and isinstance(first, int):
        return BucketCaps(cap, [first], "_bucket_config", per_bucket)
    cap = getattr(ddp, "bucket_bytes_cap", None)
    if not isinstance(cap, int):
        return BucketCaps(None, [], "unknown")
    default = getattr(ddp, "bucket_bytes_cap_default", None)
    if default is True:
        firsts = [DEFAULT_FIRST_BUCKET_BYTES]
    elif default is False:
        firsts = [cap, DEFAULT_FIRST_BUCKET_BYTES]
    else:
        firsts = [DEFAULT_FIRST_BUCKET_BYTES, cap]
    return BucketCaps(cap, firsts, "bucket_bytes_cap", per_bucket)


def torch_bucket_limits(bucket_cap_mb, bucket_cap_mb_list, static_graph: bool, find_unused: bool) -> dict | None:
    """torch's own ``_BucketCapacityConfig.create`` and ``compute_bucket_size_limits`` on these
    options (the caps and limits in bytes), or None on a torch without them (2.13 has both)."""
    from torch.nn.parallel import distributed

    config = getattr(distributed, "_BucketCapacityConfig", None)
    if config is None or not hasattr(config, "compute_bucket_size_limits"):
        return None
    c = config.create(bucket_cap_mb=bucket_cap_mb, bucket_cap_mb_list=bucket_cap_mb_list, use_python_reducer=False)
    construction, rebuild = c.compute_bucket_size_limits(static_graph=static_graph, find_unused_parameters=find_unused)
    return {"bucket_bytes_cap": c.bucket_bytes_cap, "per_bucket_bytes_caps": tuple(c.per_bucket_bytes_caps),
            "first_bucket_bytes_cap": c.first_bucket_bytes_cap, "construction": list(construction),
            "rebuild": list(rebuild)}


def layout_caps(caps: BucketCaps, params, observed: list[dict], construction: bool,
                static_graph: bool, find_unused: bool) -> list[int | None]:
    """The cap torch built each observed bucket under, or None for each when it cannot be told.

    ``observed``: the buckets in index order, ``{"params": [...]}``. Construction: torch's
    assignment over the parameters in definition order, reversed (``_ddp_init_helper``);
    rebuilt: over the observed ready order (``Reducer::rebuild_buckets``). A candidate is kept
    only if torch's own function reproduces the observed buckets.
    """
    unknown = [None] * len(observed)
    want = [list(b["params"]) for b in observed]
    if construction:
        candidates = caps.construction_limits(static_graph, find_unused) or []
        for limits in candidates:
            got = compute_bucket_assignment_by_size(params, limits, [False] * len(params))
            if got and [sorted(b) for b in reversed(got[0])] == [sorted(b) for b in want]:
                return list(reversed(got[1]))
        return unknown
    # Each dtype's params come in the observed buckets in the ready order that built them, so
    # each dtype's buckets come out the same; buckets of different dtypes may not keep their
    # positions (Note [Leftover buckets follow the hash map] in ddpsim/bucket_hashmap.py): match the
    # caps to the buckets by their parameters.
    # With DDP_SET_LAST_BUCKET_CAP=1 the buckets were built over the reversed order and then
    # reversed (Note [The small bucket last] in ddpsim/buckets.py): the second order below.
    orders = ([i for b in want for i in b], [i for b in reversed(want) for i in b])
    for order, limits in ((o, lim) for o in orders for lim in caps.rebuild_limits() or []):
        got = compute_bucket_assignment_by_size([params[i] for i in order], limits,
                                                [False] * len(order), order)
        cap_of = {tuple(sorted(b)): cap for b, cap in zip(*got)} if got else {}
        found = [cap_of.get(tuple(sorted(b))) for b in want]
        if None not in found:
            return found
    return unknown


# ----------------------------------------------------------------------------- DDP internals


def gloo_num_threads(process_group) -> int | None:
    """The threads of a gloo process group, as torch's DDP logger reads them for ``gloo_num_threads``
    (``ProcessGroupGloo::getNumThreads``); None where this torch does not expose them (checked on 2.13:
    ``_get_backend(cpu).options._threads``)."""
    try:
        return int(process_group._get_backend(torch.device("cpu")).options._threads)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


def ddp_logging_data(ddp) -> dict | None:
    """torch's ``ddp._get_ddp_logging_data()`` as a plain dict, or None where it is missing.

    Checked on 2.4 - 2.14 (a method of DistributedDataParallel since 1.9; its keys grew over
    releases, so readers use ``.get``).
    """
    fn = getattr(ddp, "_get_ddp_logging_data", None)
    if fn is None:
        return None
    try:
        return dict(fn())
    except RuntimeError:  # e.g. a logger that was never set up
        return None


def broadcast_coalesced(process_group, tensors, bucket_bytes: int, src: int = 0) -> None:
    """``dist._broadcast_coalesced`` (DDP's ``_sync_module_states``), else one broadcast per tensor.

    Checked on 2.4 - 2.14. The fallback sends the same values, in more messages.
    """
    fn = getattr(dist, "_broadcast_coalesced", None)
    if fn is not None:
        fn(process_group, list(tensors), bucket_bytes, src)
        return
    for t in tensors:
        dist.broadcast(t, src=dist.get_global_rank(process_group, src) if process_group else src,
                       group=process_group)


def ddp_params_and_buffers_to_ignore(module) -> set[str]:
    """The names torch's DDP leaves alone on ``module``: what
    ``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, names)`` stored as
    ``module._ddp_params_and_buffers_to_ignore`` (2.13's constructor reads it); empty if never set."""
    return set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))


def set_ddp_params_and_buffers_to_ignore(module, names) -> None:
    """torch's ``DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, names)``
    (run on 2.13): the full names (``named_parameters()``/``named_buffers()``) DDP should leave alone."""
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(module, list(names))


def verify_param_shape_across_processes(process_group, tensors) -> None:
    """torch's own check that every rank wraps the same model (``dist._verify_params_across_processes``,
    which DDP's constructor calls; run on 2.13 only): minddp's ``verify.py`` is tested against it."""
    dist._verify_params_across_processes(process_group, list(tensors), None)


def ddp_takes(argument: str) -> bool:
    """Whether this torch's ``DistributedDataParallel`` takes ``argument`` (read from its signature;
    ``bucket_cap_mb_list``: torch 2.13 has it; which earlier release added it was not checked)."""
    return argument in inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__).parameters


NEWER_DDP_ARGUMENTS = ("bucket_cap_mb_list", "skip_all_reduce_unused_params", "batched_grad_copy")  # torch 2.13 has them


def ddp_lacks(options: dict) -> list[str]:
    """The ``NEWER_DDP_ARGUMENTS`` given in ``options`` (not None, False or empty) that this torch's DDP does not take."""
    return [n for n in NEWER_DDP_ARGUMENTS if options.get(n) not in (None, False, []) and not ddp_takes(n)]


def torch_ddp(module, broadcast_buffers: bool = True, **options):
    """torch's ``DistributedDataParallel`` with ``broadcast_buffers`` as it meant up to 2.12: False
    means no buffer broadcast at all, neither at construction nor before each forward. 2.13
    deprecates it (a FutureWarning) for ``forward_sync_buffers``, whose False still broadcasts at
    construction, and keeps the old meaning for ``broadcast_buffers=False``; so ddpsim passes it
    only when False, with that warning silenced. Checked on 2.4 - 2.14. The arguments of
    ``NEWER_DDP_ARGUMENTS`` (torch 2.13's; which earlier release added each was not checked) are
    passed only when given (not None, False or empty), and refused in one line by a torch without them.
    """
    for name in NEWER_DDP_ARGUMENTS:
        if options.get(name) in (None, False, []):
            options.pop(name, None)
    if lacks := ddp_lacks(options):
        raise TypeError(f"torch {torch.__version__}'s DistributedDataParallel has no {lacks[0]} (torch 2.13 has it)")
    if broadcast_buffers:
        return torch.nn.parallel.DistributedDataParallel(module, **options)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*broadcast_buffers.*", category=FutureWarning)
        return torch.nn.parallel.DistributedDataParallel(module, broadcast_buffers=False, **options)


def bucket_members(ddp) -> list[list[int]]:
    """The parameters (by ``id``) of each bucket of torch's reducer now, in bucket order: its
    ``_get_zeros_like_grad_buckets`` (run on 2.13 only), which allocates a zero copy of every bucket."""
    return [[id(p) for p in b.parameters()] for b in ddp.reducer._get_zeros_like_grad_buckets()]


def wrap_sync_buffers(ddp, around) -> None:
    """Time torch DDP's buffer broadcast: ``around(call)`` runs in place of ``ddp._sync_buffers()``
    (which ``_pre_forward`` calls when ``will_sync_module_buffers()``; 2.4 - 2.14)."""
    original = ddp._sync_buffers
    ddp._sync_buffers = lambda: around(original)


def count_join_shadows(ddp):
    """Count the zero-filled bucket allreduces a joined rank issues (``_match_all_reduce_for_bwd_pass``,
    2.4 - 2.14; minddp's ``match_all_reduce_for_bwd_pass``): returns a function giving the count."""
    name = next(n for n in ("_match_all_reduce_for_bwd_pass", "match_all_reduce_for_bwd_pass") if hasattr(ddp, n))
    original, seen = getattr(ddp, name), [0]

    def counted():
        seen[0] += len(ddp.reducer._get_zeros_like_grad_buckets() if name[0] == "_" else ddp.reducer.buckets)
        original()
    setattr(ddp, name, counted)
    return lambda: seen[0]


def join_hooks(join) -> list:
    """The join hooks a ``torch.distributed.algorithms.join.Join`` runs (``_join_hooks``, 2.4 - 2.14)."""
    return join._join_hooks


def nccl_elapsed_ms(work) -> float | None:
    """A finished NCCL collective's kernel time: ``Work._get_duration``, the elapsed time between
    the start and end events ProcessGroupNCCL records around it (kept only when the group was made
    with TORCH_NCCL_ENABLE_TIMING=1). None where torch cannot tell (timing off, another backend, a
    release without it). Present on 2.4 - 2.14.
    """
    get = getattr(work, "_get_duration", None)
    if get is None:
        return None
    try:
        ms = float(get())
    except RuntimeError:  # timing off, or a backend without it
        return None
    return ms if ms >= 0 else None


def preserve_version_counter(tensors):
    """``torch.autograd._unsafe_preserve_version_counter`` (DDP's buffer broadcast), else a no-op.

    Without it an in-place broadcast into a buffer bumps its version counter; only autograd's
    "modified in place" check can notice. torch 2.4 takes one tensor (a tuple fails there with
    "'tuple' object has no attribute '_version'"); later releases take a tuple too. One context
    per tensor works on every release (checked on 2.4.1 and 2.13.0).
    """
    fn = getattr(torch.autograd, "_unsafe_preserve_version_counter", None)
    if fn is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    for t in tensors:
        stack.enter_context(fn(t))
    return stack


def is_non_overlapping_and_dense(t) -> bool:
    """``torch._prims_common.is_non_overlapping_and_dense_or_false`` (the reducer's layout test for
    a bucket view), else ``is_contiguous()``. Checked on 2.4 - 2.14."""
    try:
        from torch._prims_common import is_non_overlapping_and_dense_or_false as fn
    except ImportError:
        return bool(t.is_contiguous())
    return bool(fn(t))


def has_rebuilt_buckets(ddp) -> bool | None:
    """Whether torch's DDP has rebuilt its buckets (``Reducer::rebuild_buckets`` returned True).

    Reads ``DistributedDataParallel._has_rebuilt_buckets``, which ``_pre_forward`` sets when
    ``reducer._rebuild_buckets()`` returns True (checked in torch 2.13's distributed.py).
    None when this torch has no such attribute: callers then fall back to comparing the
    buckets they observe.
    """
    value = getattr(ddp, "_has_rebuilt_buckets", None)
    return bool(value) if value is not None else None


def replicate_module_tree(module) -> int:
    """Build one DataParallel replica's module objects the way ``replicate`` does (its Python part:
    ``Module._replicate_for_data_parallel`` on every submodule, torch/nn/parallel/replicate.py);
    returns how many were built. Checked on 2.4 - 2.14; 0 (nothing built) where it is missing."""
    copies = [m._replicate_for_data_parallel() for m in module.modules()
              if hasattr(m, "_replicate_for_data_parallel")]
    return len(copies)


def future_class():
    """The class of c10d's futures (``torch._C.Future``, 2.4 - 2.14), whose ``then`` the hook
    recorder wraps while a comm hook runs (``ddpsim/record/hookwatch.py``)."""
    return torch._C.Future


def foreach_copy_(dsts, srcs) -> None:
    """``torch._foreach_copy_`` (reducer.cpp's ``at::_foreach_copy_`` in ``flush_deferred_copies``,
    torch 2.13): every ``dsts[i].copy_(srcs[i])`` in one call. Run on 2.13 only; where it is
    missing, one ``copy_`` each (the same values: a copy does not round)."""
    fn = getattr(torch, "_foreach_copy_", None)
    if fn is not None:
        fn(list(dsts), list(srcs))
        return
    for dst, src in zip(dsts, srcs):
        dst.copy_(src)


# ----------------------------------------------------------------------------- devices and meshes
# (DDP's constructor and _pre_forward: ddpsim/minddp/devices.py)


def device_index(device) -> int:
    """``torch._utils._get_device_index(device, True)``, as DDP's constructor turns ``device_ids``
    and ``output_device`` into indices (GPU modules only; read in 2.13, not run: no GPU here)."""
    from torch._utils import _get_device_index
    return _get_device_index(device, True)


def is_sliced_mesh(mesh) -> bool:
    """Whether ``mesh`` was sliced out of a larger one, asked as this torch's DDP constructor asks:
    ``mesh._get_root_mesh() != mesh`` (2.11, 2.13), or, where that method is missing,
    ``_mesh_resources.get_parent_mesh(mesh) is not None`` (2.4)."""
    root = getattr(mesh, "_get_root_mesh", None)
    if root is not None:
        return root() != mesh
    from torch.distributed.device_mesh import _mesh_resources
    return _mesh_resources.get_parent_mesh(mesh) is not None


def pre_dp_module_transform(module) -> None:
    """``torch.distributed.tensor.parallel.ddp._pre_dp_module_transform(module)``, which DDP's
    constructor calls for a sliced mesh: DTensor parameters become local tensors, and two forward
    hooks turn them back and forth (run on 2.13 only, on modules without DTensors)."""
    from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
    _pre_dp_module_transform(module)


def to_kwargs(inputs, kwargs, device, use_side_stream: bool):
    """``torch.distributed.utils._to_kwargs``, with which DDP's ``_pre_forward`` moves the forward's
    inputs to ``device_ids[0]`` (read in 2.13, not run: no GPU here)."""
    from torch.distributed.utils import _to_kwargs
    return _to_kwargs(inputs, kwargs, device, use_side_stream)


# ----------------------------------------------------------------------------- mixed precision
# (DDP's mixed_precision argument: ddpsim/minddp/mixed_precision.py)


def mixed_precision_class():
    """torch's ``_MixedPrecision`` (torch/nn/parallel/distributed.py), the config DDP's
    ``mixed_precision`` argument takes: ``param_dtype``, ``reduce_dtype``, ``buffer_dtype``.
    Read in 2.13 only; None where this torch has none."""
    from torch.nn.parallel import distributed

    return getattr(distributed, "_MixedPrecision", None)


def free_storage(tensor) -> None:
    """``torch.distributed.utils._free_storage`` (2.13): resize ``tensor``'s storage to 0 elements;
    the tensor keeps its shape and dtype (DDP's ``_setup_mixed_precision_params``)."""
    importlib.import_module("torch.distributed._functional_collectives")  # _free_storage reads it; torch's DDP loads it
    from torch.distributed.utils import _free_storage

    _free_storage(tensor)


def alloc_storage(tensor, size) -> None:
    """``torch.distributed.utils._alloc_storage`` (2.13): give a freed ``tensor`` its storage back
    (``size.numel()`` elements); nothing if it has it (DDP's ``_root_copy_hook``)."""
    importlib.import_module("torch.distributed._functional_collectives")  # as in free_storage
    from torch.distributed.utils import _alloc_storage

    _alloc_storage(tensor, size)


def mixed_precision_upcast_hook(ddp):
    """(state, hook): torch's own comm hook for DDP's mixed precision, as 2.13's constructor
    registers it: ``_reducer_allreduce_and_upcast_hook`` with an ``_AllreduceUpcastHookState``
    (a weakref to ``ddp`` and a ``torch.Stream()``), from
    torch/distributed/algorithms/ddp_comm_hooks/mixed_precision_hooks.py. Read in 2.13 only."""
    import weakref

    from torch.distributed.algorithms.ddp_comm_hooks.mixed_precision_hooks import (
        _AllreduceUpcastHookState, _reducer_allreduce_and_upcast_hook)

    state = _AllreduceUpcastHookState(ddp_weakref=weakref.ref(ddp), upcast_stream=torch.Stream())
    return state, _reducer_allreduce_and_upcast_hook


# ----------------------------------------------------------------------------- the optimizer in the backward
# (_apply_optimizer_in_backward and _register_fused_optim: ddpsim/minddp/optimizer_in_backward.py)


def apply_optimizer_in_backward(optimizer_class, params, optimizer_kwargs) -> None:
    """``torch.distributed.optim._apply_optimizer_in_backward`` (2.13): each parameter gets its own
    ``optimizer_class([param], **optimizer_kwargs)`` in ``param._in_backward_optimizers``, and a hook
    on its AccumulateGrad that steps it (DDP removes that hook at its first forward)."""
    from torch.distributed.optim import _apply_optimizer_in_backward

    _apply_optimizer_in_backward(optimizer_class, params, optimizer_kwargs)


def optim_hook_handles(param) -> list:
    """The hooks ``_apply_optimizer_in_backward`` registered on ``param``'s AccumulateGrad
    (``torch.distributed.optim.apply_optimizer_in_backward.param_to_optim_hook_handle_map``, which
    DDP's ``_setup_in_backward_optimizers`` empties of DDP's parameters; 2.13)."""
    from torch.distributed.optim import apply_optimizer_in_backward

    return apply_optimizer_in_backward.param_to_optim_hook_handle_map.get(param, [])


def apply_optim_in_backward_hook(gradient_is_bucket_view: bool):
    """torch's own comm hook for ``_apply_optimizer_in_backward`` under DDP, as 2.13's
    ``_setup_in_backward_optimizers`` makes it: ``_apply_optim_in_backward_hook(
    gradient_is_bucket_view=...)`` from torch/distributed/algorithms/ddp_comm_hooks/
    optimizer_overlap_hooks.py. Its state is a weakref to the DDP, of which it reads ``reducer``
    (``_run_allreduce_hook``), ``process_group``, ``module`` and ``_get_data_parallel_params``."""
    from torch.distributed.algorithms.ddp_comm_hooks.optimizer_overlap_hooks import _apply_optim_in_backward_hook

    return _apply_optim_in_backward_hook(gradient_is_bucket_view=gradient_is_bucket_view)


def as_overlapped_optim(optim_cls, params, *args, **kwargs):
    """``torch.distributed.algorithms._optimizer_overlap._as_overlapped_optim`` (2.13), with which
    ``_register_fused_optim`` wraps ``optim_cls``: its functional twin (``as_functional_optim``;
    ValueError where there is none) in an ``_OptimizerHookState``; ``register_ddp(ddp)`` then
    calls ``ddp.register_comm_hook(None, _hook_then_optimizer(allreduce_hook, state))``."""
    from torch.distributed.algorithms._optimizer_overlap import _as_overlapped_optim

    return _as_overlapped_optim(optim_cls, params, *args, **kwargs)


def has_in_backward_optimizers(param) -> bool:
    """Whether ``_apply_optimizer_in_backward`` gave ``param`` optimizers (its
    ``_in_backward_optimizers`` attribute, which DDP's ``_setup_in_backward_optimizers`` looks for; 2.13)."""
    return hasattr(param, "_in_backward_optimizers")


def is_ddp_ignored(param) -> bool:
    """Whether ``param`` (or a buffer) carries ``_ddp_ignored``, which ``_set_params_and_buffers_to_ignore_for_model``
    sets (and FSDP's composable APIs); DDP's ``_get_data_parallel_params`` and its mixed precision leave such
    tensors alone (2.13; torch sets it only to True)."""
    return hasattr(param, "_ddp_ignored")


# ----------------------------------------------------------------------------- DDP's private methods
# torch's DDP methods that training code calls by their private names; minddp's DDP has the same names
# (ddpsim/minddp/ddp_methods.py, optimizer_in_backward.py), so these take either. Run on 2.13 only.


def register_builtin_comm_hook(ddp, kind: str) -> None:
    """``ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.<kind>)``: "ALLREDUCE" or "FP16_COMPRESS"."""
    ddp._register_builtin_comm_hook(getattr(torch.distributed.BuiltinCommHookType, kind))


def find_common_rank(ddp, rank: int, condition: bool) -> int:
    """``ddp._find_common_rank(rank, condition)`` (Join's choice of a rank; minddp names it ``find_common_rank``)."""
    fn = getattr(ddp, "_find_common_rank", None)
    return (fn or ddp.find_common_rank)(rank, condition)


def set_static_graph(ddp) -> None:
    """``ddp._set_static_graph()``: static_graph after construction, before the first synced forward."""
    ddp._set_static_graph()


def set_ddp_runtime_logging_sample_rate(ddp, sample_rate: int) -> None:
    """``ddp._set_ddp_runtime_logging_sample_rate(n)``: after the first ten iterations, time one in ``n``."""
    ddp._set_ddp_runtime_logging_sample_rate(sample_rate)


def remove_autograd_hooks(ddp) -> None:
    """``ddp._remove_autograd_hooks()``: the reducer's gradient hooks, removed."""
    ddp._remove_autograd_hooks()


def check_reducer_finalized(ddp) -> None:
    """``ddp._check_reducer_finalized()``: raises where the last backward left a reduction unfinished."""
    ddp._check_reducer_finalized()


def register_fused_optim(ddp, optim, *args, optim_params=None, **kwargs) -> None:
    """``ddp._register_fused_optim(optim, *args, optim_params=..., **kwargs)``: the optimizer in the backward."""
    ddp._register_fused_optim(optim, *args, optim_params=optim_params, **kwargs)
