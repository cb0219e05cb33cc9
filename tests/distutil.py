"""Run a function on N real gloo ranks in a test: ``ddpsim.ranks`` (one implementation).

    results = run_ranks(fn, world_size=2, args=(...,), timeout=120)
"""
from ddpsim.ranks import RankFailure, free_port, run_ranks  # noqa: F401

__all__ = ["RankFailure", "free_port", "run_ranks"]
