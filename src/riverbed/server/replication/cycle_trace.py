"""Stage stamps of the replication cycle, for ``benchmarks/replication_cycle.py`` (issue 23).

An acks=all produce on a replicated partition is answered after a cycle: the leader
appends, a parked follower fetch is woken and answered, the follower appends and fetches
again from its new log end, that fetch moves the high watermark, the delayed produce is
completed and its response sent. With ``RIVERBED_CYCLE_TRACE=<path prefix>`` in its
environment a node stamps each stage (``time.monotonic_ns``: CLOCK_MONOTONIC, one clock
for every process of the machine) and writes them to ``<prefix>.<pid>`` as
``<ns> <event> <values...>`` lines, at most `CYCLE_TRACE_EVENTS_MAX` of them, so that
the benchmark can follow each offset through both sides. Without the variable nothing is
recorded: every call site checks ``TRACE is not None`` first.

Events (offsets are end offsets: the offset after the last record):

- leader: ``produce_in`` (a Produce request reached its handler), ``append <end>``,
  ``fetch_in <replica> <fetch offset>`` (a follower's Fetch reached its handler),
  ``hw <high watermark>``, ``fetch_out <replica> <fetch offset> <end> <bytes>`` (its
  answer is ready), ``produce_done <end>`` (the delayed produce completed),
  ``produce_out <end>`` (the Produce answer is ready);
- follower: ``f_sent <fetch offset>``, ``f_recv <bytes>`` (the response read),
  ``f_appended <log end>`` (the response handled: appended, high watermark set).
"""

from __future__ import annotations

import atexit
import os
import time
from typing import Final, TextIO

#: Environment variable naming the trace files' path prefix.
CYCLE_TRACE_ENV: Final = "RIVERBED_CYCLE_TRACE"
#: Events one process records at most (the benchmark needs a few hundred cycles).
CYCLE_TRACE_EVENTS_MAX: Final = 500_000


class CycleTrace:
    """Stage stamps buffered in memory (at most ``events_max``), written at exit."""

    def __init__(self, out: TextIO, events_max: int = CYCLE_TRACE_EVENTS_MAX) -> None:
        self.out = out
        self.events_max = events_max
        self.count = 0
        self._lines: list[str] = []

    def event(self, name: str, *values: int) -> None:
        if self.count >= self.events_max:
            return
        self.count += 1
        self._lines.append(f"{time.monotonic_ns()} {name} {' '.join(map(str, values))}\n")

    def flush(self) -> None:
        lines, self._lines = self._lines, []
        self.out.writelines(lines)
        self.out.flush()


def _from_env() -> CycleTrace | None:
    prefix = os.environ.get(CYCLE_TRACE_ENV)
    if not prefix:
        return None
    trace = CycleTrace(open(f"{prefix}.{os.getpid()}", "w"))  # noqa: SIM115 (closed at exit)
    atexit.register(trace.flush)
    return trace


#: This process's trace (None: not tracing).
TRACE: CycleTrace | None = _from_env()
