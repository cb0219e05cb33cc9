"""``Actor``: one rank of the simpy model, or a group of ranks it stands for (api.py), with the
compute speed it plays each micro-step (stragglers, rank noise, or the recorded ranks)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Actor:
    rank: int  # the rank it is labelled as
    count: int  # how many ranks it stands for
    factors: list[float]  # compute multiplier per micro-step (straggler x jitter)
    record: bool = False
    kind: str = "rank"
    iterations: list = field(default_factory=list)  # raw records when ``record``
    backward_scale: float = 1.0  # its own backward speed (measured; extract.rank_factors)
    synced_backward_scale: float = 1.0  # ... and on its synced micro-steps alone (SimConfig.synced_backward_scale)
    recorded: dict | None = None  # its recorded micro-steps (SimConfig.recorded_ranks), or None
    data_steps: int | None = None  # micro-steps it has data for (SimConfig.uneven); None: every one
    shadows: list = field(default_factory=list)  # under Join: (micro-step, start, end, [(launch, Work)])
    join_start: float | None = None  # under Join: when it left its own loop (sim/join.py)
    join_end: float | None = None  # ... and when the final model sync ended

    def multipliers(self, i: int, sync: bool = True, scale: tuple[float, float] = (1.0, 1.0)) -> tuple[float, float]:
        """(forward, backward) compute multipliers at micro-step ``i``, a synced one or not (``sync``);
        ``scale``: the workload's for the micro-step's kind (``Workload.micro_step_scale``)."""
        f = self.factors[i]
        bw = f * self.backward_scale * (self.synced_backward_scale if sync else 1.0)
        if self.recorded is None:
            return f * scale[0], bw * scale[1]
        n = len(self.recorded["forward"])
        return f * self.recorded["forward"][i % n] * scale[0], bw * self.recorded["backward"][i % n] * scale[1]

    def gap_after(self, i: int, default: float) -> float:
        """Seconds between micro-step ``i``'s end and the next one's forward (the recorded gap, or ``default``)."""
        if self.recorded is None:
            return default
        gaps = self.recorded["gap_s"]
        return gaps[(i + 1) % len(gaps)]
