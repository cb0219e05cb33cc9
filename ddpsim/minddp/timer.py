"""DDP's runtime timer: ``c10d::Timer`` (torch/csrc/distributed/c10d/reducer_timer.hpp, torch 2.13),
reducer.cpp's ``CpuTimer``, and the reducer's side of it: ``should_collect_runtime_stats`` and the
five ``record_*_time`` methods, mixed into minddp's Reducer (minddp/reducer.py).

Note [The runtime timer]: in the sampled iterations (``should_collect_runtime_stats``: the first ten,
then every hundredth, as ``prepare_for_forward`` counts them; DDP's
``_set_ddp_runtime_logging_sample_rate`` changes the hundred) the reducer stamps five moments with the
host clock, in nanoseconds since the epoch (``c10::getTime()``; ``time.time_ns()`` here):

  forward start            ``prepare_for_forward`` (DDP's ``_pre_forward``)
  backward compute start   ``prepare_for_backward`` (DDP's ``_post_forward``)
  backward comm start      ``mark_bucket_ready``, as the first bucket is launched
  backward compute end     the callback ``mark_variable_ready`` queues once every bucket is launched,
                           before it runs ``finalize_backward``
  backward comm end        the end of ``finalize_backward``, every bucket waited for

static_graph's first backward reduces everything in ``delay_all_reduce``, which stamps compute end and
comm start together as it begins, so the comm start comes after the compute end there. A stamp stays
until a later sampled iteration overwrites it. At the next synced forward the Logger turns the stamps
into durations (Note [What the logging data holds] in minddp/logging_data.py); a duration whose end is
before its start (the overlap of static_graph's first iteration) is not measured.
"""
from __future__ import annotations

import enum
import time

SAMPLE_RATE = 100  # kDDPRuntimeLoggingSampleRate (reducer.hpp)
UNSET = -1  # kUnsetTime


class Event(enum.Enum):
    """``Timer::Event``."""
    FORWARD_START = "kForwardStart"
    BACKWARD_COMPUTE_START = "kBackwardComputeStart"
    BACKWARD_COMPUTE_END = "kBackwardComputeEnd"
    BACKWARD_COMM_START = "kBackwardCommStart"
    BACKWARD_COMM_END = "kBackwardCommEnd"


class CpuTimer:
    """Mirrors ``c10d::Timer`` with reducer.cpp's ``CpuTimer``: one host timestamp per event."""

    def __init__(self):
        self.times = dict.fromkeys(Event, UNSET)

    def record(self, event: Event) -> None:
        """Mirrors ``Timer::record``: the event happened now."""
        self.times[event] = time.time_ns()

    def measure_difference(self, start: Event, end: Event) -> int | None:
        """Mirrors ``CpuTimer::measureDifference``: ``end - start`` in ns, None when end is before start
        (two unset events give 0, as in torch)."""
        start_ns, end_ns = self.times[start], self.times[end]
        return None if end_ns < start_ns else end_ns - start_ns

    def get_timestamp(self, event: Event) -> int | None:
        """Mirrors ``Timer::getTimestamp``: the host timestamp, None if never recorded."""
        return None if self.times[event] == UNSET else self.times[event]


class RuntimeStats:
    """The timer's part of ``c10d::Reducer`` (Note [The runtime timer]). Expects ``num_iterations``
    and ``timer``. torch checks ``should_collect_runtime_stats()`` at each call site of a
    ``record_*_time``; here each ``record_*_time`` checks it, which is the same."""

    ddp_runtime_logging_sample_rate = SAMPLE_RATE  # ddp_runtime_logging_sample_rate_ (reducer.hpp)

    def set_ddp_runtime_logging_sample_rate(self, sample_rate: int) -> None:
        """Mirrors ``Reducer::set_ddp_runtime_logging_sample_rate`` (DDP's
        ``_set_ddp_runtime_logging_sample_rate`` checked it is at least 1)."""
        self.ddp_runtime_logging_sample_rate = sample_rate

    def should_collect_runtime_stats(self) -> bool:
        """Mirrors ``Reducer::should_collect_runtime_stats``: iterations 1 to 10, then every
        ``ddp_runtime_logging_sample_rate``-th (100 unless DDP's ``_set_ddp_runtime_logging_sample_rate``)."""
        n = self.num_iterations
        return n > 0 and (n <= 10 or n % self.ddp_runtime_logging_sample_rate == 0)

    def _record(self, event: Event) -> None:
        if self.should_collect_runtime_stats():
            self.timer.record(event)

    def record_forward_compute_start_time(self) -> None:
        """Mirrors ``Reducer::record_forward_compute_start_time`` (``prepare_for_forward``)."""
        self._record(Event.FORWARD_START)

    def record_backward_compute_start_time(self) -> None:
        """Mirrors ``Reducer::record_backward_compute_start_time`` (``prepare_for_backward``)."""
        self._record(Event.BACKWARD_COMPUTE_START)

    def record_backward_compute_end_time(self) -> None:
        """Mirrors ``Reducer::record_backward_compute_end_time`` (the queued callback, ``delay_all_reduce``)."""
        self._record(Event.BACKWARD_COMPUTE_END)

    def record_backward_comm_start_time(self) -> None:
        """Mirrors ``Reducer::record_backward_comm_start_time`` (``mark_bucket_ready``, ``delay_all_reduce``)."""
        self._record(Event.BACKWARD_COMM_START)

    def record_backward_comm_end_time(self) -> None:
        """Mirrors ``Reducer::record_backward_comm_end_time`` (the end of ``finalize_backward``)."""
        self._record(Event.BACKWARD_COMM_END)

    def finalize_callback(self) -> None:
        """Mirrors the lambda ``Reducer::mark_variable_ready`` queues on the autograd engine once every
        bucket is launched: the backward's computation ends here, then ``finalize_backward`` runs."""
        self.record_backward_compute_end_time()
        self.finalize_backward()
