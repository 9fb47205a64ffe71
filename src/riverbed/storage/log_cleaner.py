"""The background log cleaner: which compacted logs to clean, when, with what resources.

Every ``log.cleaner.backoff.ms`` (checked from the log manager's periodic work) the
cleaner picks, among the logs whose ``cleanup.policy`` contains ``compact``, those whose
dirty ratio (dirty bytes since the cleaner checkpoint / cleanable bytes) reaches
``min.cleanable.dirty.ratio`` or whose oldest dirty record is older than
``max.compaction.lag.ms``, dirtiest first, and cleans up to ``log.cleaner.threads`` of
them at once in its own thread pool (0 threads, or ``log.cleaner.enable=false``: no
cleaning). Each thread owns an `OffsetMap` of ``log.cleaner.dedupe.buffer.size /
threads`` bytes; reads and writes together are throttled to
``log.cleaner.io.max.bytes.per.second``.

For the metrics (Kafka's LogCleaner / LogCleanerManager gauges) it keeps the figures of
the last ``log.cleaner.threads`` cleanings (`CleanerRun`: Kafka keeps each cleaner
thread's last stats; riverbed's pool threads have no identity, so the last cleanings
stand for them), the largest dirty ratio of the last scan, and the partitions whose last
cleaning failed (``uncleanable``: Kafka's marked partitions; riverbed retries them at the
next scan instead of skipping them until a restart).

``cleaner-offset-checkpoint`` (one per log dir, the offset-checkpoint format: version 0,
count, ``topic partition offset`` lines) holds each log's first dirty offset; it is
written after every cleaning and read at start-up.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from riverbed.storage.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from riverbed.storage.cleaner import CLEANER_CHECKPOINT, OffsetMap
from riverbed.storage.clock import Clock
from riverbed.storage.time_index import NO_TIMESTAMP

log = logging.getLogger(__name__)

Key = tuple[str, int]
_UNLIMITED = float("inf")


class CleanerStopped(Exception):
    """The cleaner is shutting down: the pass in progress stops (nothing is swapped)."""


@dataclass(frozen=True, slots=True)
class CleanerConfig:
    enable: bool = True
    threads: int = 1
    dedupe_buffer_bytes: int = 134_217_728
    io_max_bytes_per_second: float = _UNLIMITED
    backoff_ms: int = 15_000

    @classmethod
    def from_broker(cls, get: Callable[[str], Any]) -> CleanerConfig:
        rate = get("log.cleaner.io.max.bytes.per.second")
        return cls(
            enable=bool(get("log.cleaner.enable")),
            threads=int(get("log.cleaner.threads")),
            dedupe_buffer_bytes=int(get("log.cleaner.dedupe.buffer.size")),
            io_max_bytes_per_second=float(rate) if rate is not None else _UNLIMITED,
            backoff_ms=int(get("log.cleaner.backoff.ms")),
        )


@dataclass(frozen=True, slots=True)
class CleanerRun:
    """One cleaning's figures, as Kafka's cleaner metrics read its ``CleanerStats``."""

    elapsed_ms: int
    #: bytes the copy pass read (the map's and the header pass's reads are not counted,
    #: as in Kafka) and bytes it wrote
    bytes_read: int
    bytes_written: int
    #: keys in the dedupe buffer / its slots at the end of the cleaning
    buffer_utilization: float


class _Throttle:
    """Keeps the bytes per second of one cleaning under the configured rate."""

    def __init__(self, rate: float, stopped: threading.Event, clock: Clock) -> None:
        self.rate = rate
        self.stopped = stopped
        # the injected clock (storage reads none itself): milliseconds are precise enough
        # for a rate over a whole cleaning
        self.clock = clock
        self.started_ms = clock.now_ms()
        self.done = 0

    def __call__(self, n: int) -> None:
        if self.stopped.is_set():
            raise CleanerStopped()
        self.done += n
        if self.rate == _UNLIMITED:
            return
        ahead = self.done / self.rate - (self.clock.now_ms() - self.started_ms) / 1000
        if ahead > 0:
            self.stopped.wait(ahead)


class LogCleaner:
    """Cleans compacted logs of a log manager in the background (module docstring)."""

    def __init__(
        self,
        config: CleanerConfig,
        logs: Callable[[], Mapping[Key, Any]],
        dir_of: Callable[[Key], Path | None],
        dirs: list[Path],
        clock: Clock,
    ) -> None:
        self.config = config
        self.clock = clock
        self._logs = logs
        self._dir_of = dir_of
        self._dirs = dirs
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self.first_dirty: dict[Key, int] = {}
        #: Latest delete horizon of the tombstones each log kept at its last cleaning.
        self.delete_horizons: dict[Key, int] = {}
        for d in dirs:
            try:
                self.first_dirty.update(read_offset_checkpoint(d / CLEANER_CHECKPOINT))
            except Exception as e:  # a bad checkpoint only costs a full cleaning
                log.warning("ignoring unreadable %s: %s", d / CLEANER_CHECKPOINT, e)
        self._pool: ThreadPoolExecutor | None = None
        self._scanner: ThreadPoolExecutor | None = None
        self._scan: Future[Any] | None = None
        self._maps: list[OffsetMap] = []
        self._free_maps: list[OffsetMap] = []
        self._inflight: dict[Key, Future[Any]] = {}
        self._next_run_ms = 0
        self.cleanings = 0
        #: the last cleanings, one per cleaner thread (see the module docstring)
        self.last_runs: deque[CleanerRun] = deque(maxlen=max(config.threads, 1))
        #: the largest dirty ratio among the compacted logs at the last scan
        self.max_dirty_ratio = 0.0
        #: partitions whose last cleaning failed
        self.uncleanable: set[Key] = set()
        #: when the last scan for dirty logs ran (-1: never)
        self.last_scan_ms = -1

    @property
    def enabled(self) -> bool:
        return self.config.enable and self.config.threads > 0

    def maybe_schedule(self, now_ms: int) -> Future[Any] | None:
        """Every ``log.cleaner.backoff.ms``: look for dirty logs (off the caller's thread:
        the dirty ratios read segment metadata) and start their cleanings."""
        if not self.enabled or self._stopped.is_set() or now_ms < self._next_run_ms:
            return None
        if self._scan is not None and not self._scan.done():
            return None
        if not any(plog.config.compact_enabled for plog in list(self._logs().values())):
            return None  # nothing to compact: no thread is started
        self._next_run_ms = now_ms + self.config.backoff_ms
        if self._pool is None:
            self._scanner = ThreadPoolExecutor(1, thread_name_prefix="riverbed-cleaner-scan")
            self._pool = ThreadPoolExecutor(
                self.config.threads, thread_name_prefix="riverbed-cleaner"
            )
        assert self._scanner is not None
        self._scan = self._scanner.submit(self.start_cleanings, now_ms)
        return self._scan

    def start_cleanings(self, now_ms: int) -> list[Future[Any]]:
        """Start cleanings of the dirtiest logs on the free cleaner threads."""
        assert self._pool is not None
        with self._lock:
            for key in [k for k, f in self._inflight.items() if f.done()]:
                del self._inflight[key]
            free = self.config.threads - len(self._inflight)
        started: list[Future[Any]] = []
        for key, plog in self.due(now_ms)[: max(free, 0)]:
            if self._stopped.is_set():
                break
            fut = self._pool.submit(self.clean_log, key, plog, now_ms)
            with self._lock:
                self._inflight[key] = fut
            started.append(fut)
        return started

    def due(self, now_ms: int) -> list[tuple[Key, Any]]:
        """Compacted logs worth cleaning now, dirtiest first."""
        found: list[tuple[float, Key, Any]] = []
        dirtiest = 0.0
        for key, plog in list(self._logs().items()):
            cfg = plog.config
            if not cfg.compact_enabled or key in self._inflight:
                continue
            first_dirty = self.first_dirty.get(key, 0)
            horizon = self.delete_horizons.get(key, -1)
            if 0 <= horizon <= now_ms:
                found.append((1.0, key, plog))  # tombstones to remove
                continue
            ratio, dirty = plog.dirty_ratio(first_dirty, now_ms)
            if not dirty:
                continue
            dirtiest = max(dirtiest, ratio)
            overdue = False
            if cfg.max_compaction_lag_ms < 2**63 - 1:
                for c in plog.cleanable_segments(now_ms):
                    if c.end_offset > first_dirty:
                        ts = c.segment.largest_timestamp()
                        overdue = ts != NO_TIMESTAMP and ts < now_ms - cfg.max_compaction_lag_ms
                        break
            if ratio >= cfg.min_cleanable_dirty_ratio or overdue:
                found.append((ratio, key, plog))
        found.sort(key=lambda t: -t[0])
        self.max_dirty_ratio = dirtiest
        self.last_scan_ms = now_ms
        return [(key, plog) for _ratio, key, plog in found]

    def _take_map(self) -> OffsetMap:
        with self._lock:
            if self._free_maps:
                return self._free_maps.pop()
            offset_map = OffsetMap(self.config.dedupe_buffer_bytes // max(self.config.threads, 1))
            self._maps.append(offset_map)
            return offset_map

    def clean_log(self, key: Key, plog: Any, now_ms: int) -> Any:
        offset_map = self._take_map()
        try:
            throttle = _Throttle(self.config.io_max_bytes_per_second, self._stopped, self.clock)
            horizon = self.delete_horizons.get(key, -1)
            started_ms = self.clock.now_ms()
            result = plog.clean(
                self.first_dirty.get(key, 0),
                offset_map,
                now_ms,
                throttle,
                expire_tombstones=0 <= horizon <= now_ms,
            )
            if result is not None:
                self.first_dirty[key] = result.first_dirty
                self.delete_horizons[key] = result.stats.delete_horizon_ms
                self.cleanings += 1
                self._write_checkpoint(key)
                self.last_runs.append(
                    CleanerRun(
                        self.clock.now_ms() - started_ms,
                        result.bytes_copied_from,
                        result.bytes_written,
                        offset_map.utilization,
                    )
                )
            with self._lock:
                self.uncleanable.discard(key)
            return result
        except CleanerStopped:
            return None
        except Exception:
            log.exception("cleaning %s-%d failed", *key)
            with self._lock:
                self.uncleanable.add(key)
            return None
        finally:
            offset_map.clear()
            with self._lock:
                self._free_maps.append(offset_map)

    def _write_checkpoint(self, key: Key) -> None:
        d = self._dir_of(key)
        if d is None:
            return
        offsets = {
            k: v for k, v in self.first_dirty.items() if k in self._logs() and self._dir_of(k) == d
        }
        write_offset_checkpoint(d / CLEANER_CHECKPOINT, offsets)

    def wait(self, timeout_s: float | None = None) -> None:
        """Until the current scan and the cleanings it started are over (tests)."""
        if self._scan is not None:
            self._scan.result(timeout_s)
        with self._lock:
            inflight = list(self._inflight.values())
        for fut in inflight:
            fut.result(timeout_s)

    def forget(self, key: Key) -> None:
        """A log was deleted: its checkpoint entry goes too (at the next write)."""
        self.first_dirty.pop(key, None)
        self.delete_horizons.pop(key, None)
        with self._lock:
            self.uncleanable.discard(key)

    def uncleanable_by_dir(self) -> dict[Path, int]:
        """Partitions whose last cleaning failed, per log dir (LogCleanerManager's
        ``uncleanable-partitions-count``): every dir, 0 included."""
        with self._lock:
            keys = list(self.uncleanable)
        counts = dict.fromkeys(self._dirs, 0)
        for key in keys:
            d = self._dir_of(key)
            if d is not None:
                counts[d] = counts.get(d, 0) + 1
        return counts

    def shutdown(self) -> None:
        self._stopped.set()
        for pool in (self._scanner, self._pool):
            if pool is not None:
                pool.shutdown(wait=True)
