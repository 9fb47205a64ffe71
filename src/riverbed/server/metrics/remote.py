"""Tiered storage meters (Kafka's BrokerTopicMetrics ``RemoteCopy*PerSec`` and
``RemoteFetch*PerSec``, over all topics).

`RemoteLogStats` is updated by the remote log manager: copies run in its copier pool, so
every update takes a lock (a copy is a whole segment upload: the lock costs nothing
beside it); remote reads are counted in the event loop when their result is back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector


class RemoteLogStats:
    """Counts of segment copies and remote reads (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.copy_bytes = 0
        self.copy_requests = 0
        self.copy_errors = 0
        self.fetch_bytes = 0
        self.fetch_requests = 0
        self.fetch_errors = 0

    def copied(self, size_bytes: int) -> None:
        with self._lock:
            self.copy_requests += 1
            self.copy_bytes += size_bytes

    def copy_failed(self) -> None:
        with self._lock:
            self.copy_requests += 1
            self.copy_errors += 1

    def fetched(self, size_bytes: int, error: int) -> None:
        with self._lock:
            self.fetch_requests += 1
            self.fetch_bytes += size_bytes
            if error:
                self.fetch_errors += 1

    def snapshot(self) -> tuple[int, int, int, int, int, int]:
        with self._lock:
            return (
                self.copy_bytes,
                self.copy_requests,
                self.copy_errors,
                self.fetch_bytes,
                self.fetch_requests,
                self.fetch_errors,
            )


class RemoteLogCollector(Collector):
    """``kafka_server_brokertopicmetrics_remote*_total`` when tiering is on."""

    def __init__(self, stats: Callable[[], RemoteLogStats | None]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[CounterMetricFamily]:
        stats = self.stats()
        if stats is None:
            return
        names = (
            ("remotecopybytes", "Segment bytes copied to the remote tier"),
            ("remotecopyrequests", "Segment copies tried"),
            ("remotecopyerrors", "Segment copies failed"),
            ("remotefetchbytes", "Bytes read from the remote tier for fetches"),
            ("remotefetchrequests", "Remote reads for fetches"),
            ("remotefetcherrors", "Remote reads answered with an error"),
        )
        for (suffix, doc), value in zip(names, stats.snapshot(), strict=True):
            yield CounterMetricFamily(f"kafka_server_brokertopicmetrics_{suffix}", doc, value=value)
