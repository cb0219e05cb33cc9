"""The What-if page's caution for a comm hook that the recording's backend does not run as the simulator
plays it (no Streamlit).

torch's PowerSGD on gloo with several buckets, or with find_unused_parameters (its bitmap allreduce),
aborts (SIGABRT) or hangs: the ranks issue P's and Q's allreduces in different orders (Note [PowerSGD on
gloo with several buckets] in ddpsim/minddp/comm_hook.py; docs/comm-hooks.md). The simulator plays them in
order on every rank, as NCCL does. The caution's words are the sweep's (``layout_sweep.powersgd_on_gloo``).
"""
from __future__ import annotations

from ddpsim.learn.layout_sweep import powersgd_on_gloo


def powersgd_gloo_caution(trace, cfg, summary: dict) -> list[str]:
    """[the caution] where the what-if ``cfg`` runs torch's PowerSGD on a gloo recording (``trace``) with
    several buckets (``summary["n_buckets"]``, as simulated) or find_unused_parameters; [] elsewhere, and
    where a GPU network is chosen (NCCL's model: ``cfg.hardware``)."""
    if trace is None or cfg.hardware is not None:
        return []
    simulated = {"n_buckets": summary.get("n_buckets", 0), "find_unused_parameters": cfg.find_unused_parameters}
    caution = powersgd_on_gloo(simulated, [], trace.meta.get("backend"), cfg.comm_hook,
                               figures="the what-if's figures are")
    return [caution] if caution else []
