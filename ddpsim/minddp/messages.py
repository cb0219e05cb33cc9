"""Errors raised by the readable DDP, worded to say what went wrong and what to do."""
from __future__ import annotations


class MissingGradientError(RuntimeError):
    """A synced backward finished while some parameters never got a gradient."""


class MarkedReadyTwiceError(RuntimeError):
    """A parameter's gradient became ready twice in one backward."""


def _names(indices, names) -> str:
    return ", ".join(f"{names[i]} (index {i})" for i in indices)


def missing_gradients(rank: int, indices, names, find_unused: bool, static_graph: bool = False) -> str:
    """The text of ``ensure_prior_reduction_finished`` in reducer.cpp, with names; its advice follows
    torch's three cases (static_graph, then find_unused_parameters, then neither)."""
    head = (f"minddp (rank {rank}): a new forward started before the previous backward was reduced, "
            f"but {len(indices)} parameter(s) received no gradient: {_names(indices, names)}.\n"
            "DDP launches a bucket's allreduce only when every parameter in the bucket "
            "has its gradient, so these buckets were never reduced and the ranks would "
            "disagree (torch DDP's words: 'Expected to have finished reduction in the "
            "prior iteration before starting a new one').\n")
    if static_graph:  # torch: "This error indicates that your training graph has changed in this iteration"
        return head + (
            "static_graph=True: this error indicates that your training graph has changed in this "
            "iteration (torch's words), e.g. a parameter used in the first iteration got no gradient "
            "now. static_graph needs the same parameters in the loss every iteration: keep them so, "
            "or construct DDP without static_graph (with find_unused_parameters=True if some go unused).")
    if find_unused:
        return head + (
            "find_unused_parameters=True is on, so the graph search found these "
            "parameters in the forward graph: most likely some `forward` output did not "
            "take part in the loss. Make every output take part in the loss.")
    return head + (
        "Fix it in one of two ways: pass find_unused_parameters=True to "
        "DistributedDataParallel (it searches the autograd graph after each forward and "
        "marks unused parameters ready), or make every parameter take part in the loss "
        "on every rank and every iteration.")


def marked_twice(rank: int, index: int, names) -> str:
    """The text of ``checkAndRaiseMarkedTwiceError`` in reducer.cpp."""
    return (f"minddp (rank {rank}): parameter {names[index]} (index {index}) was marked "
            "ready twice in one backward: two autograd hooks fired for it (torch: 'Expected "
            "to mark a variable ready only once'). Usual causes: the parameter is used "
            "outside `forward`, in a second forward whose graph joins this backward, or in "
            "several reentrant backward passes (e.g. the same layer wrapped by more than "
            "one `checkpoint(..., use_reentrant=True)`). Use each parameter in one "
            "forward/backward per iteration, or use_reentrant=False.")

# reducer.cpp's REDUCER_CHECKs, word for word (torch 2.13)
GRAPH_CHANGED = ("Your training graph has changed in this iteration, e.g., one parameter is unused in first "
                 "iteration, but then got used in the second iteration. this is not compatible with "
                 "static_graph set to True.")
UNDEFINED_BUT_USED = ("Encountered gradient which is undefined, but still allreduced by DDP reducer. This "
                      "indicates a bug in DDP implementation, please report a bug with a repro to PyTorch.")

# ``all_reduce_local_used_map`` where the Reducer never made its map (Note [A late _set_static_graph] in
# minddp/ddp_methods.py): torch's words for the undefined tensor it copies
NO_LOCAL_USED_MAP = "Expected a proper Tensor but got None (or an undefined Tensor in C++) for argument #0 'self'"
# ``ensure_prior_reduction_finished``'s TORCH_INTERNAL_ASSERT (reducer.cpp, torch 2.13): a backward marked every
# parameter ready but was never finalized; torch's text names its build's file and line, minddp the function
NO_UNMARKED_PARAMS = ("!unmarked_param_indices.empty() INTERNAL ASSERT FAILED at reducer.cpp "
                      "(Reducer::ensure_prior_reduction_finished), please report a bug to PyTorch. ")

# distributed.py's ``_set_static_graph`` (torch 2.13), a UserWarning, word for word
STATIC_GRAPH_FINDS_UNUSED = (
    "You passed find_unused_parameters=true to DistributedDataParallel, `_set_static_graph` will detect unused "
    "parameters automatically, so you do not need to set find_unused_parameters=true, just be sure these unused "
    "parameters will not change during training loop while calling `_set_static_graph`.")

# reducer.cpp's words (torch 2.13) for a second comm hook: the one being registered is named first
ONCE_BUILTIN = "register_builtin_comm_hook or register_comm_hook can only be called once."
ONCE_PYTHON = "register_comm_hook or register_builtin_comm_hook can only be called once."
# ``Reducer::set_static_graph`` once an iteration has run (Note [A late _set_static_graph] in minddp/ddp_methods.py)
STATIC_GRAPH_TOO_LATE = ("set_static_graph() should be called before training loop starts and after "
                         "DistributedDataParallel is constructed.")

# ``finalize_bucket_dense``'s REDUCER_CHECK under gradient_as_bucket_view (Note [Checks on a ready gradient] in
# minddp/grad_checks.py), word for word (torch 2.13)
NOT_BUCKET_VIEW = ("Detected at least one parameter gradient is not the expected DDP bucket view with "
                   "gradient_as_bucket_view=True. This may happen (for example) if multiple allreduce hooks were "
                   "registered onto the same parameter. If you hit this error, please file an issue with a minimal "
                   "repro.")


def strides_differ(grad, view) -> str:
    """``check_grad_layout``'s TORCH_WARN_ONCE, word for word (torch 2.13), less the "(Triggered internally at
    <torch's build path>:<line>.)" that torch adds when it passes a C++ warning to Python."""
    return ("Grad strides do not match bucket view strides. This may indicate grad was not created according to "
            "the gradient layout contract, or that the param's strides changed since DDP was constructed.  This is "
            "not an error, but may impair performance.\n"
            f"grad.sizes() = {list(grad.shape)}, strides() = {list(grad.stride())}\n"
            f"bucket_view.sizes() = {list(view.shape)}, strides() = {list(view.stride())}")
