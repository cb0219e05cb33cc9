"""Processes from Linux's /proc: one's state and parent, and every process below one (elsewhere,
where /proc is missing: nothing found).

The launcher asks whether a rank is stopped (``record/launcher.is_stopped``), the grader stops what a
graded file left running (``grade/__main__.py``), and the fault-injection tests find ranks below a
launcher (``tests/faultinject.py``)."""
from __future__ import annotations

import os


def stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent's pid) of ``pid`` from /proc/PID/stat: "Z" a zombie, "T" or "t"
    stopped; None once it is gone. The name before the state may hold spaces and parentheses: the
    fields are read after its last ")"."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
        return state, int(ppid)
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running or sleeping (or stopped): neither gone nor a zombie."""
    s = stat(pid)
    return s is not None and s[0] != "Z"


def descendants(root: int | None = None, living: bool = False) -> list[int]:
    """Every process below ``root`` (default: this one), parents before their children, from one
    read of /proc; ``living``: zombies (ended, not yet reaped) left out."""
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    children: dict[int, list[int]] = {}
    for pid in pids:
        s = stat(pid)
        if s is not None and not (living and s[0] == "Z"):
            children.setdefault(s[1], []).append(pid)
    found, todo = [], [os.getpid() if root is None else root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found
