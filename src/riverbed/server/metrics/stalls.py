"""Event-loop stalls and garbage-collection pauses: where a node's latency tail goes.

A node does its network and handler work in one event loop, so anything that holds the
loop (a long callback, a blocking system call, a collection of the garbage collector, a
CPU the kernel gives to another process) delays every request in flight: an acks=all
produce waits for the follower fetch that the stalled loop does not answer. Kafka has no
such gauge (its handler threads stall one at a time); these are riverbed's own:

- ``riverbed_event_loop_stalls_total``: wake-ups of a sampler task that sleeps
  `STALL_SAMPLE_INTERVAL_MS` and came back more than `STALL_MS` late (the loop could not
  run it), and ``riverbed_event_loop_stall_seconds_max``, the longest lateness since start;
- ``python_gc_pauses_total`` / ``python_gc_pause_seconds_total`` /
  ``python_gc_pause_seconds_max`` per generation, timed by a ``gc.callbacks`` hook (the
  collector runs on the loop thread, so a pause is a stall).

A wake-up at least `STALL_LOG_MS` late is also logged (WARNING, at most one line per
`STALL_LOG_INTERVAL_MS`, counting the ones it left out): how late, and how much of the
sample the loop's thread spent on a CPU and collecting garbage. The rest it did not run:
it waited for a CPU, sat in a blocking system call, or the process was stopped. So a
latency spike in a client's figures can be matched with the node's log, and a busy loop
told from a starved one.

The sampler costs one timer wake-up per interval; the hook two clock reads per collection.
An idle node does not need 100 samples a second (they cost ~0.9% of a core per idle node,
a third of its idle CPU, `benchmarks/idle_cost.py`): while the loop's thread used less than `BUSY_SHARE_MIN` of a CPU
over the last sample and that sample came on time, the sampler sleeps
`STALL_SAMPLE_IDLE_INTERVAL_MS` instead (`next_sample_interval_ms`). So a stall in the
first quarter second of a burst that follows idleness may go unseen, and a stall while idle
is seen only when a sample falls in it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

#: How often the stall sampler asks the loop to wake it.
STALL_SAMPLE_INTERVAL_MS = 10
#: ... while the loop is idle (see `next_sample_interval_ms`).
STALL_SAMPLE_IDLE_INTERVAL_MS = 250
#: The share of a CPU the loop's thread uses, at least, over a sample while busy.
BUSY_SHARE_MIN = 0.05
#: A sample at least this late (ms) means the loop is busy (or the machine is), whatever
#: the loop's own CPU.
BUSY_LATE_MS = 1.0
#: A wake-up later than this counts as a stall (a tenth of the p99 goal of issue 23's
#: acks=all latency would be 1 ms; 5 ms is what a client notices).
STALL_MS = 5
GENERATIONS = 3
#: A wake-up at least this late (ms) is logged: 2.5x issue 23's p99 goal, and rare on a
#: healthy node (in 100 s of acks=all RF3 runs at 127,000 records/s on 2 cores, only the
#: kernel's writeback of 1.2 GB of dirty pages held a loop this long), so the log says
#: when and why a client saw a spike.
STALL_LOG_MS = 25
#: At most one stall line per this many ms (the others are counted in the next line).
STALL_LOG_INTERVAL_MS = 10_000

log = logging.getLogger(__name__)


class StallStats:
    """Counters of loop stalls and collector pauses (sans-I/O: callers give the times)."""

    def __init__(self) -> None:
        self.stalls = 0
        self.stall_max_s = 0.0
        self.gc_pauses = [0] * GENERATIONS
        self.gc_pause_s = [0.0] * GENERATIONS
        self.gc_pause_max_s = [0.0] * GENERATIONS
        #: loop time (s) of the last stall line; stalls over STALL_LOG_MS left out since
        self._logged_at_s: float | None = None
        self._unlogged = 0

    def woke(self, late_s: float) -> None:
        """The sampler woke ``late_s`` seconds after it asked to."""
        if late_s * 1000 > STALL_MS:
            self.stalls += 1
        self.stall_max_s = max(self.stall_max_s, late_s)

    def collected(self, generation: int, pause_s: float) -> None:
        """The collector ran on ``generation`` for ``pause_s`` seconds."""
        g = min(max(generation, 0), GENERATIONS - 1)
        self.gc_pauses[g] += 1
        self.gc_pause_s[g] += pause_s
        self.gc_pause_max_s[g] = max(self.gc_pause_max_s[g], pause_s)

    def stall_line(
        self, late_s: float, wall_s: float, cpu_s: float, gc_s: float, now_s: float
    ) -> str | None:
        """The WARNING line for a sample ``late_s`` late, ``wall_s`` long, of which the loop's
        thread ran ``cpu_s`` and garbage collection took ``gc_s`` (wall time: a collection
        can be preempted too); None when it was less than `STALL_LOG_MS` late, or a line
        went out less than `STALL_LOG_INTERVAL_MS` ago."""
        if late_s * 1000 < STALL_LOG_MS:
            return None
        last = self._logged_at_s
        if last is not None and (now_s - last) * 1000 < STALL_LOG_INTERVAL_MS:
            self._unlogged += 1
            return None
        self._logged_at_s = now_s
        left_out, self._unlogged = self._unlogged, 0
        cpu_s, gc_s = min(cpu_s, wall_s), min(gc_s, wall_s)
        line = (
            f"event loop stalled {late_s * 1000:.0f} ms: in the {wall_s * 1000:.0f} ms since the "
            f"sampler last ran, the loop's thread ran {cpu_s * 1000:.0f} ms and was off a CPU "
            f"{(wall_s - cpu_s) * 1000:.0f} ms (waiting for one, in a blocking system call, or "
            f"the process stopped); garbage collection took {gc_s * 1000:.0f} ms of it"
        )
        if left_out:
            line += f"; {left_out} more stall(s) over {STALL_LOG_MS} ms since the last such line"
        return line

    def gc_hook(self, clock: Callable[[], float] = time.perf_counter) -> Callable[..., None]:
        """A ``gc.callbacks`` entry timing every collection into these counters."""
        started = [0.0]

        def hook(phase: str, info: dict[str, int]) -> None:  # gc.callbacks' signature
            if phase == "start":
                started[0] = clock()
            else:
                self.collected(int(info.get("generation", 0)), clock() - started[0])

        return hook

    async def run(
        self,
        interval_ms: int = STALL_SAMPLE_INTERVAL_MS,
        idle_interval_ms: int = STALL_SAMPLE_IDLE_INTERVAL_MS,
        thread_time: Callable[[], float] = time.thread_time,
    ) -> None:
        """The sampler and the collector hook, in the node's loop until cancelled
        (``thread_time``: the loop thread's CPU seconds; the sampler runs on it)."""
        hook = self.gc_hook()
        gc.callbacks.append(hook)
        loop = asyncio.get_running_loop()
        sleep_ms = interval_ms
        cpu = thread_time()
        try:
            while True:
                asked, gc_before = loop.time(), sum(self.gc_pause_s)
                await asyncio.sleep(sleep_ms / 1000)
                now = loop.time()
                wall_s = now - asked
                late_s = max(0.0, wall_s - sleep_ms / 1000)
                self.woke(late_s)
                cpu, cpu_before = thread_time(), cpu
                gc_s = sum(self.gc_pause_s) - gc_before
                line = self.stall_line(late_s, wall_s, cpu - cpu_before, gc_s, now)
                if line is not None:
                    log.warning("%s", line)
                sleep_ms = next_sample_interval_ms(
                    cpu - cpu_before, wall_s, late_s, interval_ms, idle_interval_ms
                )
        finally:
            gc.callbacks.remove(hook)


def next_sample_interval_ms(
    cpu_s: float, wall_s: float, late_s: float, interval_ms: int, idle_interval_ms: int
) -> int:
    """The sampler's next sleep: ``interval_ms`` while the loop is busy (its thread used at
    least `BUSY_SHARE_MIN` of a CPU over the last sample, ``cpu_s`` of ``wall_s``, or the
    sample was `BUSY_LATE_MS` late), ``idle_interval_ms`` while it is idle."""
    if cpu_s >= BUSY_SHARE_MIN * wall_s or late_s * 1000 >= BUSY_LATE_MS:
        return interval_ms
    return idle_interval_ms


class StallCollector(Collector):
    def __init__(self, stats: StallStats) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        s = self.stats
        yield CounterMetricFamily(
            "riverbed_event_loop_stalls",
            f"Wake-ups of the loop's stall sampler more than {STALL_MS} ms late",
            value=s.stalls,
        )
        yield GaugeMetricFamily(
            "riverbed_event_loop_stall_seconds_max",
            "Longest lateness of the loop's stall sampler since start",
            value=s.stall_max_s,
        )
        count = CounterMetricFamily(
            "python_gc_pauses", "Garbage collections by generation", labels=["generation"]
        )
        total = CounterMetricFamily(
            "python_gc_pause_seconds",
            "Time the garbage collector held the loop thread, by generation",
            labels=["generation"],
        )
        worst = GaugeMetricFamily(
            "python_gc_pause_seconds_max",
            "Longest garbage collection since start, by generation",
            labels=["generation"],
        )
        for g in range(GENERATIONS):
            count.add_metric([str(g)], s.gc_pauses[g])
            total.add_metric([str(g)], s.gc_pause_s[g])
            worst.add_metric([str(g)], s.gc_pause_max_s[g])
        yield count
        yield total
        yield worst
