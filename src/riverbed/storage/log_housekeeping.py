"""A node's time-driven log work, as `LogManager` runs it (mixed into it): fsyncs of the
logs that are due, retention, the removal of deleted segments and partition dirs, and the
offset checkpoints.

Everything that touches the disk runs in the manager's bounded pool
(``flush_threads_max`` threads), never on the caller's event loop: a flush, a retention pass
(it loads inactive segments' indexes and deletes files), an unlink of a large file, a
checkpoint write. At most one of each is in flight (one flush per log, one retention pass,
one expired-segment sweep, one write per checkpoint file), so a stalled disk cannot pile up
work in the pool's queue. A checkpoint is never written to an offline log dir: its recovery
points must not move once a write there failed.

Checkpoint files (Kafka's, one of each per log dir; `riverbed.storage.checkpoints`):
``recovery-point-offset-checkpoint`` (each log's recovery point),
``log-start-offset-checkpoint`` (log start offsets) and ``replication-offset-checkpoint``
(high watermarks), each on its own interval.
"""

from __future__ import annotations

import functools
import logging
import shutil
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from riverbed.storage.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    write_offset_checkpoint,
)
from riverbed.storage.errors import LogDirError
from riverbed.storage.log import PartitionLog
from riverbed.storage.log_cleaner import LogCleaner
from riverbed.storage.log_manager_state import Key, LogManagerState

log = logging.getLogger("riverbed.storage.log_manager")


class LogHousekeeping(LogManagerState):
    """Flushes, retention, deletes and checkpoints (mixed into LogManager)."""

    cleaner: LogCleaner
    _inflight: dict[Key, Future[int]]
    _retention_inflight: Future[int] | None
    _expiry_inflight: Future[None] | None
    #: checkpoint file name -> its interval, next due time, write in flight
    _intervals: dict[str, int]
    _next_checkpoint: dict[str, int]
    _checkpoint_inflight: dict[str, Future[None]]

    all_logs: Callable[[], dict[Key, PartitionLog]]
    _close_offline_logs: Callable[[], None]
    _schedule_throttled_moves: Callable[[int], None]

    def schedule_retention(self, now_ms: int) -> Future[int] | None:
        """Run :meth:`run_retention` in the pool (None while the previous run is going on).

        Retention loads inactive segments' indexes and deletes files: disk work that can
        block, so it never runs on the caller's event loop.
        """
        with self._lock:
            if self._closed:
                return None
            pending = self._retention_inflight
            if pending is not None and not pending.done():
                return None
            fut = self._pool.submit(self.run_retention, now_ms)
            self._retention_inflight = fut
            return fut

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log now (in this thread); returns segments deleted."""
        deleted = 0
        for plog in self.all_logs().values():
            try:
                deleted += plog.delete_old_segments(now_ms)
            except (OSError, LogDirError) as e:
                log.error("retention of %s failed: %s", plog.name, e)
        if deleted:
            self._write_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        self._delete_expired_segments(now_ms)
        return deleted

    def flush_due(self, now_ms: int) -> list[Future[Any]]:
        """Start fsyncs of logs that are due; delayed deletes; checkpoints when due.

        Returns the futures of the background work started: flushes (at most one per
        log in flight; the result is the new recovery point) and partition dir removals.
        """
        started: list[Future[Any]] = []
        self._close_offline_logs()
        self._schedule_throttled_moves(now_ms)
        with self._lock:
            if self._closed:
                return started
            for key, plog in self._logs.items():
                if key in self._inflight or not plog.flush_due(now_ms):
                    continue
                fut = self._pool.submit(plog.flush)
                self._inflight[key] = fut
                fut.add_done_callback(functools.partial(self._flush_done, key))
                started.append(fut)
        started += self._delete_due(now_ms)
        self.cleaner.maybe_schedule(now_ms)  # its own threads (see LogCleaner.wait)
        for name, interval in self._intervals.items():
            pending = self._checkpoint_inflight.get(name)
            # At most one write per checkpoint file in flight: a stalled disk must not pile
            # up writes in the pool's queue (a later write carries newer offsets anyway).
            if now_ms >= self._next_checkpoint[name] and (pending is None or pending.done()):
                self._next_checkpoint[name] = now_ms + interval
                self._checkpoint_inflight[name] = self._pool.submit(self._write_checkpoint, name)
        return started

    def _flush_done(self, key: tuple[str, int], fut: Future[int]) -> None:
        with self._lock:
            if self._inflight.get(key) is fut:
                del self._inflight[key]
        exc = fut.exception()
        if exc is not None:
            log.error("flush of %s-%d failed: %s", key[0], key[1], exc)

    def flush_all(self) -> None:
        """fsync every log now (in the caller's thread)."""
        for plog in self.all_logs().values():
            plog.flush()

    def _delete_due(self, now_ms: int) -> list[Future[None]]:
        """In the pool: unlink expired ``.deleted`` segments, remove due ``-delete`` dirs
        (an unlink of a large file can block for long: never on the caller's loop)."""
        with self._lock:
            due = [p for t, p in self._pending_dir_deletes if t <= now_ms]
            self._pending_dir_deletes = [(t, p) for t, p in self._pending_dir_deletes if t > now_ms]
            if not self._closed:
                started = [self._pool.submit(shutil.rmtree, p, ignore_errors=True) for p in due]
                pending = self._expiry_inflight
                idle = pending is None or pending.done()  # at most one sweep in flight
                if idle and any(plog.deletes_pending for plog in self._logs.values()):
                    self._expiry_inflight = self._pool.submit(self._delete_expired_segments, now_ms)
                    started.append(self._expiry_inflight)
                return started
        self._delete_expired_segments(now_ms)
        for path in due:
            shutil.rmtree(path, ignore_errors=True)
        return []

    def _delete_expired_segments(self, now_ms: int) -> None:
        for plog in self.all_logs().values():
            try:
                plog.delete_expired_files(now_ms)
            except OSError as e:
                log.error("cannot remove deleted segments of %s: %s", plog.name, e)

    def write_checkpoints(self) -> None:
        """Write all three offset checkpoints of every log dir now."""
        for name in self._intervals:
            self._write_checkpoint(name)

    def _write_checkpoint(self, name: str) -> None:
        getters: dict[str, Callable[[PartitionLog], int]] = {
            RECOVERY_POINT_CHECKPOINT: lambda p: p.recovery_point,
            LOG_START_OFFSET_CHECKPOINT: lambda p: p.log_start_offset,
            REPLICATION_OFFSET_CHECKPOINT: lambda p: p.high_watermark,
        }
        get = getters[name]
        with self._lock:
            per_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
            for key, plog in self._logs.items():
                per_dir[self._dir_of[key]][key] = get(plog)
        for d, offsets in per_dir.items():
            if self._dirs[d].offline:
                continue  # never again: the recovery points there must not move
            try:
                write_offset_checkpoint(d / name, offsets, io=self._io)
            except OSError as e:
                self._dirs[d].fail(f"write {d / name}", e)
