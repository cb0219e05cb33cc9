"""Turning a rank's failure into one plain sentence a learner can act on."""
from __future__ import annotations

import re

# Errors that a rank gets *because another rank failed*: never the root cause.
SECONDARY = re.compile(r"Connection closed by peer|Connection reset|Broken pipe|\bpeers?\b|"
                       r"Timed out|timed out|timeout|NCCL communicator was aborted|stopped before finishing",
                       re.IGNORECASE)
SIGNALLED = "died from signal"  # how the launcher words a rank killed by a signal
UNREDUCED = "Expected to have finished reduction in the prior iteration"
GRAPH_CHANGED = re.compile(r"static_graph set to True|Your training graph has changed")  # torch's static_graph
INDICES = re.compile(r"Parameter indices which did not receive grad for rank (\d+):\s*([\d ]+)")


def is_secondary(error: str | None) -> bool:
    """Whether ``error`` is a consequence of another rank's failure. A rank killed by a signal is
    a cause whatever its last output line says (gloo in torch 2.10 logs "Rank 1 is connected to 1
    peer ranks" at start-up, which ``SECONDARY`` would match)."""
    if not error or error.startswith(SIGNALLED):
        return False
    return bool(SECONDARY.search(error))


def names_for(indices: list[int], params: list[dict]) -> list[str]:
    by_index = {p["index"]: p["name"] for p in params if p.get("index") is not None}
    return [by_index.get(i, f"#{i}") for i in indices]


def explain(rank: int, error: str, params: list[dict]) -> str:
    """One line: which rank, what happened, and what to do."""
    if GRAPH_CHANGED.search(error):  # before UNREDUCED: torch's static_graph message starts with it
        return (f"rank {rank} stopped because the parameters in the loss changed between iterations, which "
                "static_graph=True does not allow (it learns them in the first iteration, whatever "
                "find_unused_parameters says): use the same parameters every iteration, or record without "
                "--static-graph (with --find-unused-parameters if some go unused).")
    if UNREDUCED in error:
        found = INDICES.search(error)
        if found:
            indices = [int(x) for x in found.group(2).split()]
            which = ", ".join(names_for(indices, params))
            got = f"these parameters got no gradient on rank {found.group(1)}: {which}"
        else:
            got = "some parameters got no gradient"
        return (f"rank {rank} stopped at the start of the next iteration because {got}, so DDP "
                "never finished reducing their bucket. With find_unused_parameters off, every "
                "parameter must take part in the loss on every rank and every iteration: turn on "
                "find_unused_parameters (--find-unused-parameters), or make the model use all its parameters.")
    first = error.strip().splitlines()[0] if error.strip() else "no message"
    return f"rank {rank} failed: {first}"


def root_cause(errors: dict[int, str]) -> tuple[int, str] | None:
    """The rank whose error is not a consequence of another rank's failure."""
    if not errors:
        return None
    primary = {r: e for r, e in errors.items() if not is_secondary(e)}
    rank = min(primary) if primary else min(errors)
    return rank, errors[rank]


GLOO_MISMATCH = "doesn't match expected size"  # gloo's abort when two ranks pair different collectives


def powersgd_on_gloo(cfg, errors: dict[int, str], hang: bool) -> str:
    """What to add to a failed recording's line with torch's PowerSGD hook on gloo (Note [PowerSGD on gloo
    with several buckets] in ddpsim/minddp/comm_hook.py), else "". Seen here on 3 gloo ranks: the MLP at
    the default cap aborted ("Received data size doesn't match expected size"), with
    --find-unused-parameters it hung in bucket 1's allreduce, and branchy with find_unused_parameters
    aborted even in one 100 MiB bucket (the bitmap allreduce interleaves). ``cfg``: the RecordConfig;
    ``errors``: each failed rank's line; ``hang``: the run was stopped for a rank that made no progress."""
    if cfg.comm_hook != "powersgd" or cfg.resolved_backend() != "gloo":
        return ""
    if hang and ((cfg.uneven and not cfg.join) or (not cfg.find_unused_parameters and (cfg.bucket_cap_mb or 0) >= 100)):
        return ""  # uneven inputs without Join hang on their own; a run already as advised hangs for another reason
    if not (hang or any(GLOO_MISMATCH in e for e in errors.values())):
        return ""  # another failure (an unused parameter, say) has its own line
    return ("; PowerSGD on gloo: torch's powerSGD_hook launches its P and Q allreduces from gloo's callback thread, "
            "so with several buckets, or find_unused_parameters' bitmap allreduce, the ranks can launch them in "
            "different orders and gloo pairs the wrong ones: record it with one bucket (--bucket-cap-mb 100) and "
            "without --find-unused-parameters, or on NCCL")
