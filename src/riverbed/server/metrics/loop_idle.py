"""Kafka's idle ratios of the one event loop that does a node's network and handler work.

Kafka has network processor threads (``kafka.network:type=SocketServer,
name=NetworkProcessorAvgIdlePercent``: the fraction of time they wait in ``select``) and
request handler threads (``kafka.server:type=KafkaRequestHandlerPool,
name=RequestHandlerAvgIdlePercent``: the fraction of time they wait for a request). A
riverbed node does both jobs in one asyncio event loop, so **both gauges are the same
measure**: the fraction of wall time the loop's thread was neither running nor waiting
for a CPU, i.e. asleep in the loop's selector (epoll) waiting for I/O or a timer.

How: uvloop's selector is not Python's and cannot be wrapped, so the loop thread's
scheduler statistics are read instead (``/proc/self/task/<tid>/schedstat``: nanoseconds
on a CPU and nanoseconds runnable but waiting for one, the kernel's own accounting, free
on the hot path). Busy = the sum of both (time waiting for a CPU is not idle: the loop
had work, as Kafka's processors spend it outside ``select``); idle = 1 - busy / elapsed.
A sampler task in the loop takes a sample every `IDLE_SAMPLE_INTERVAL_MS`; the gauges
average over the last ``metrics.sample.window.ms`` of samples. Where schedstat is missing
(a kernel without CONFIG_SCHED_INFO) the thread's CPU time alone is used. Time the loop
thread spends blocked in a synchronous system call (a page-cache miss) or waiting for
the GIL held by a pool thread counts as idle: the kernel sees it asleep.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

#: How often the sampler reads the loop thread's busy time.
IDLE_SAMPLE_INTERVAL_MS = 1000


def schedstat_busy_ns(tid: int) -> Callable[[], int]:
    """The busy nanoseconds of thread ``tid`` so far (on a CPU + waiting for one); the
    calling thread's CPU time when the kernel keeps no schedstat (then call it on ``tid``)."""
    path = f"/proc/self/task/{tid}/schedstat"

    def busy() -> int:
        with open(path, "rb") as f:
            on_cpu, run_wait, _slices = f.read().split()
        return int(on_cpu) + int(run_wait)

    try:
        busy()
    except (OSError, ValueError):
        return time.thread_time_ns
    return busy


class LoopIdle:
    """The idle fraction of the loop thread over a window of samples (sans-I/O: the
    sample source and the clock are given)."""

    def __init__(
        self,
        window_ms: int,
        busy_ns: Callable[[], int],
        now_ns: Callable[[], int] = time.monotonic_ns,
        interval_ms: int = IDLE_SAMPLE_INTERVAL_MS,
    ) -> None:
        self.busy_ns = busy_ns
        self.now_ns = now_ns
        self.interval_ms = interval_ms
        #: (wall ns, busy ns): one more than the window holds, for its first difference
        self.samples: deque[tuple[int, int]] = deque(maxlen=max(window_ms // interval_ms, 1) + 1)

    def sample(self) -> None:
        self.samples.append((self.now_ns(), self.busy_ns()))

    def idle_ratio(self) -> float:
        """1 - busy / elapsed between the oldest and the newest sample (1.0 before two)."""
        if len(self.samples) < 2:
            return 1.0
        (wall0, busy0), (wall1, busy1) = self.samples[0], self.samples[-1]
        if wall1 <= wall0:
            return 1.0
        return min(1.0, max(0.0, 1.0 - (busy1 - busy0) / (wall1 - wall0)))

    async def run(self) -> None:
        """The sampler: a sample every ``interval_ms``, on the loop's own thread."""
        while True:
            self.sample()
            await asyncio.sleep(self.interval_ms / 1000)


def loop_idle_here(window_ms: int) -> LoopIdle:
    """A `LoopIdle` of the calling thread (the node's event loop)."""
    return LoopIdle(window_ms, schedstat_busy_ns(threading.get_native_id()))


class LoopIdleCollector(Collector):
    """NetworkProcessorAvgIdlePercent and RequestHandlerAvgIdlePercent, both from the
    one loop's idle fraction (0..1, as Kafka's, despite the names)."""

    def __init__(self, idle: LoopIdle) -> None:
        self.idle = idle

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ratio = self.idle.idle_ratio()
        yield GaugeMetricFamily(
            "kafka_network_socketserver_networkprocessoravgidlepercent",
            "Fraction of time the event loop waited for I/O (the node's one loop does the"
            " network processors' work)",
            value=ratio,
        )
        yield GaugeMetricFamily(
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
            "Fraction of time the event loop waited for I/O (the node's one loop does the"
            " request handlers' work: the same measure)",
            value=ratio,
        )
