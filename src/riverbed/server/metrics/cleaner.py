"""The log cleaner's gauges (kafka.log LogCleaner and LogCleanerManager), read at scrape
time from `riverbed.storage.log_cleaner.LogCleaner`.

Kafka's definitions, over the last cleaning of each cleaner thread (`CleanerRun`):

- ``max-clean-time-secs``: the longest of them;
- ``cleaner-recopy-percent``: 100 x bytes written / bytes read, summed over them;
- ``max-buffer-utilization-percent``: 100 x the fullest dedupe buffer (keys / slots);
- LogCleanerManager ``max-dirty-percent``: 100 x the largest dirty ratio (dirty bytes /
  cleanable bytes) among the compacted logs at the last scan;
  ``uncleanable-partitions-count`` per ``logDirectory``: partitions whose last cleaning
  failed; ``time-since-last-run-ms``: since the last scan (0 before the first).

Kafka writes the percents and seconds as integers; riverbed keeps the fractions (the
same series, more precise).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from riverbed.storage.clock import Clock
from riverbed.storage.log_cleaner import CleanerRun


class CleanerView(Protocol):
    """What the gauges read (`LogCleaner`)."""

    @property
    def last_runs(self) -> Sequence[CleanerRun]: ...
    @property
    def max_dirty_ratio(self) -> float: ...
    @property
    def last_scan_ms(self) -> int: ...
    @property
    def clock(self) -> Clock: ...

    def uncleanable_by_dir(self) -> dict[Path, int]: ...


class CleanerCollector(Collector):
    """kafka.log LogCleaner / LogCleanerManager gauges (module docstring)."""

    def __init__(self, cleaner: Callable[[], CleanerView | None]) -> None:
        self.cleaner = cleaner

    def collect(self) -> Iterator[GaugeMetricFamily]:
        cleaner = self.cleaner()
        if cleaner is None:
            return
        runs = list(cleaner.last_runs)
        read = sum(r.bytes_read for r in runs)
        written = sum(r.bytes_written for r in runs)
        p = "kafka_log_logcleaner_"
        yield GaugeMetricFamily(
            p + "max_clean_time_secs",
            "Longest of the cleaner threads' last cleanings, seconds",
            value=max((r.elapsed_ms for r in runs), default=0) / 1000,
        )
        yield GaugeMetricFamily(
            p + "cleaner_recopy_percent",
            "Bytes written / bytes read by the last cleanings, percent",
            value=100 * written / max(read, 1),
        )
        yield GaugeMetricFamily(
            p + "max_buffer_utilization_percent",
            "Fullest dedupe buffer of the last cleanings (keys / slots), percent",
            value=100 * max((r.buffer_utilization for r in runs), default=0.0),
        )
        m = "kafka_log_logcleanermanager_"
        yield GaugeMetricFamily(
            m + "max_dirty_percent",
            "Largest dirty ratio of the compacted logs at the last scan, percent",
            value=100 * cleaner.max_dirty_ratio,
        )
        last = cleaner.last_scan_ms
        yield GaugeMetricFamily(
            m + "time_since_last_run_ms",
            "Since the cleaner last looked for dirty logs (0: not yet)",
            value=max(0, cleaner.clock.now_ms() - last) if last >= 0 else 0,
        )
        uncleanable = GaugeMetricFamily(
            m + "uncleanable_partitions_count",
            "Partitions whose last cleaning failed",
            labels=["logDirectory"],
        )
        for d, n in sorted(cleaner.uncleanable_by_dir().items()):
            uncleanable.add_metric([str(d)], n)
        yield uncleanable
