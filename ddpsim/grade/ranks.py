"""Run a function on N real gloo ranks for the autograder: ``ddpsim.ranks`` (one implementation)."""
from ddpsim.ranks import RankFailure, free_port, run_ranks  # noqa: F401

__all__ = ["RankFailure", "free_port", "run_ranks"]
