"""LogBase: the unified log's state, its loading and the reads it serves.

:class:`~riverbed.storage.log.PartitionLog` is assembled from this base and two mixins,
:mod:`riverbed.storage.log_retention` (retention, DeleteRecords, the remote tier's
offsets) and :mod:`riverbed.storage.log_cleaning` (compaction); the module docstring of
:mod:`riverbed.storage.log` describes the whole. The segments are the
:class:`~riverbed.storage.local_log.LocalLog`'s: this layer reaches them only through its
methods, under its own lock first (unified -> local).

Loading (at construction): the local log removes leftover files and opens the segments
by their 20-digit names; after a clean shutdown the active segment's tail state is read
from its indexes plus a short header scan, otherwise every segment from the one holding
the recovery point on is validated batch by batch (length, CRC, offsets), the first
invalid batch and everything after it truncated, indexes and leader epochs rebuilt, and
the recovered segments fsynced. A checkpointed log start offset past the log end restarts
the log empty there (as Kafka does).

Creation is cheap, as in Kafka: a new log opens only the ``.log`` of its first segment
(indexes are lazy, :mod:`riverbed.storage.index_file`), and ``partition.metadata`` is
only recorded as dirty (Kafka's ``PartitionMetadataFile.record``); the first flush or
close writes it atomically and fsyncs the partition dir and, for a dir this log created,
its parent (``maybeFlush``). A crash before that leaves a log without
``partition.metadata`` or index files, which loads fine: the index files are rebuilt and
the topic id is recorded again by the next ``get_or_create``.

``segment.jitter.ms``: each segment draws its own jitter in
``[0, min(segment.jitter.ms, segment.ms))`` from the log's ``random.Random`` (Kafka's
``LogConfig.randomSegmentJitter``), injected so tests are deterministic.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from riverbed.protocol.records import BatchHeader
from riverbed.storage.checkpoints import (
    PARTITION_METADATA,
    CheckpointError,
    fsync_dir,
    read_partition_metadata,
    write_partition_metadata,
)
from riverbed.storage.clock import Clock
from riverbed.storage.config import LogConfig
from riverbed.storage.epoch_cache import LeaderEpochCache
from riverbed.storage.errors import LogDirError, OffsetOutOfRangeError
from riverbed.storage.file_io import FileIO
from riverbed.storage.local_log import LocalLog
from riverbed.storage.locks import OuterLock
from riverbed.storage.log_dir import LogDir
from riverbed.storage.log_files import ReadResult, TimestampOffset
from riverbed.storage.producer_hook import ProducerStateHook
from riverbed.storage.segment import LogSegment

__all__ = ["LogBase", "RetentionHook"]

log = logging.getLogger("riverbed.storage.log")

# Decides whether a segment may be deleted by retention (False = keep it for now), e.g.
# tiered storage vetoing segments not yet copied to the remote tier. Called with the
# PartitionLog and the segment.
RetentionHook = Callable[[Any, LogSegment], bool]


class LogBase:
    """State of one unified partition log plus what every part of it needs."""

    directory: Path
    topic: str
    partition: int
    config: LogConfig
    clock: Clock
    retention_hook: RetentionHook | None
    producer_state: ProducerStateHook | None
    epoch_cache: LeaderEpochCache
    topic_id: str | None
    log_dir: LogDir  # the dir's health: offline after any write/fsync failure in it
    _local: LocalLog  # the segments (its lock is taken after this log's, never before)
    _io: FileIO
    _lock: OuterLock
    _flush_lock: threading.Lock  # one flush at a time (its fsyncs run outside both locks)
    _log_start_offset: int
    _high_watermark: int
    _last_append_time: int | None  # None: not read back from the log yet
    _metadata_dirty: bool  # partition.metadata to write on the next flush/close
    _metadata_lock: threading.Lock  # one metadata/dir flush at a time (outside _lock)
    # Tiered storage (KIP-405): the broker's remote.log.storage.system.enable; the log is
    # tiered when that and the topic's remote.storage.enable hold (see `tiered`).
    remote_log_enabled: bool
    # Last offset the remote tier holds ("copied up to"; -1: none), published by the
    # remote log manager; local retention deletes only segments at or below it.
    _highest_offset_in_remote: int
    # DeleteRecords removed everything below this offset (-1: none since the log opened):
    # adopting the remote tier's start never moves the log start below it.
    _records_deleted_before: int
    # Called with the new segment's base offset after a roll (under the log's lock: it
    # must be quick and thread-safe), e.g. to wake the remote log manager.
    roll_listener: Callable[[int], None] | None

    def _truncate_fully(self, offset: int) -> None:
        raise NotImplementedError

    def _roll(self, base_offset: int) -> LogSegment:
        raise NotImplementedError

    # ---- identity and offsets ------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def segments(self) -> list[LogSegment]:
        return self._local.segments

    @property
    def closed(self) -> bool:
        return self._local.closed

    @property
    def offline(self) -> bool:
        """True once a write or fsync failed in this log's dir (see log_dir.py)."""
        return self.log_dir.offline

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def tiered(self) -> bool:
        """Rolled segments go to the remote tier (broker and topic both enable it)."""
        return self.remote_log_enabled and self.config.tiered

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on local disk (Kafka's localLogStartOffset; ListOffsets -4).

        Equal to the log start offset unless the log is tiered: then the log start
        offset is the earliest offset of the remote tier.
        """
        return max(self._log_start_offset, self._local.start_offset)

    @property
    def highest_offset_in_remote(self) -> int:
        return self._highest_offset_in_remote

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def last_append_time(self) -> int:
        """The newest LogAppendTime stamped in this log (-1 when there is none)."""
        with self._lock:
            return self._known_last_append_time()

    def _known_last_append_time(self) -> int:
        # The last stamped LogAppendTime survives restarts and leader changes because it
        # is read back from the log: from LogAppendTime batches only. A CreateTime batch
        # carries a client's clock (maybe an hour ahead) and must not pin later stamps of
        # a topic switched to LogAppendTime. Read lazily, on the first LogAppendTime
        # append, so logs of CreateTime topics never pay for the scan.
        if self._last_append_time is None:
            self._last_append_time = self._local.max_log_append_time()
        return self._last_append_time

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @contextlib.contextmanager
    def _failing_dir(self, what: str) -> Iterator[None]:
        """An OSError inside takes the log dir offline (see riverbed.storage.log_dir)."""
        try:
            yield
        except OSError as e:
            raise self.log_dir.fail(f"{self.name}: {what}", e) from e

    def _check_open(self) -> None:
        self.log_dir.check(self.name)
        if self._local.closed:
            raise LogDirError(f"{self.name}: log is closed")

    def _assign_epoch_from_batch(self, h: BatchHeader) -> None:
        if h.partition_leader_epoch > self.epoch_cache.latest_epoch:
            self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

    # ---- reads (the segments' part is the local log's) ---------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        upper_bound: int | None = None,
        *,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches from the one containing ``offset``, as file ranges.

        At most ``max_bytes`` (but at least one whole batch when ``min_one_batch``), and
        only batches entirely below ``upper_bound`` (high watermark or log end; default the
        log end). Raises OffsetOutOfRangeError outside [local log start, log end] (below
        the local log start of a tiered log, the remote tier serves the offset).
        """
        with self._lock:
            self.log_dir.check(self.name)  # an offline dir serves nothing (Kafka's rule)
            lso, leo = self.local_log_start_offset, self.log_end_offset
            if offset < lso or offset > leo:
                raise OffsetOutOfRangeError(
                    f"{self.name}: offset {offset} is out of range [{lso}, {leo}]"
                )
            bound = leo if upper_bound is None else min(upper_bound, leo)
            ranges, first, nxt = self._local.read(offset, bound, max_bytes, min_one_batch)
            return ReadResult(
                ranges=ranges,
                first_offset=first,
                next_offset=nxt,
                high_watermark=self._high_watermark,
                log_start_offset=self._log_start_offset,
                log_end_offset=leo,
            )

    def batch_headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches ending at or after ``offset`` up to the log end (for
        rebuilding state from the log, e.g. producer state; no CRC check)."""
        with self._lock:
            yield from self._local.batch_headers_from(offset)

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after the log start with timestamp >= ``timestamp``.

        ListOffsets by time: None when every record is older.
        """
        with self._lock:
            self.log_dir.check(self.name)
            return self._local.offset_for_timestamp(timestamp, self._log_start_offset)

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp."""
        with self._lock:
            self.log_dir.check(self.name)
            return self._local.max_timestamp_offset(self._log_start_offset)

    # ---- loading and partition metadata -------------------------------------------------

    def _init_topic_id(self, topic_id: str | None) -> str | None:
        path = self.directory / PARTITION_METADATA
        try:
            stored = read_partition_metadata(path)
        except CheckpointError as e:
            log.warning("%s: rewriting unreadable partition.metadata: %s", self.name, e)
            stored = None
        if topic_id is not None and stored != topic_id:
            self._metadata_dirty = True  # written by the first flush/close (maybeFlush)
            return topic_id
        return stored

    def _flush_metadata(self) -> None:
        """Kafka's ``maybeFlush``: write a dirty ``partition.metadata``; fsync new dirs and
        a ``leader-epoch-checkpoint`` written without fsync (before the recovery point may
        cover the epoch).

        Runs outside the log's lock (appends go on); ``_metadata_lock`` serializes it.
        """
        with self._metadata_lock:
            with self._lock:
                dirty, topic_id = self._metadata_dirty, self.topic_id
                dir_sync, parent_sync = self._local.dir_sync.take()
                epochs = self.epoch_cache.take_unsynced()
            if not (dirty or dir_sync or parent_sync or epochs):
                return
            try:
                if epochs:
                    # its rename is made durable by the partition dir fsync below
                    self.epoch_cache.sync_file(sync_dir=False)
                    dir_sync = True
                if dirty and topic_id is not None:
                    # fsyncs the file and the partition dir (covering new segment files)
                    write_partition_metadata(
                        self.directory / PARTITION_METADATA, topic_id, self._io
                    )
                elif dir_sync:
                    fsync_dir(self.directory, self._io)
                if parent_sync:
                    fsync_dir(self.directory.parent, self._io)
            except OSError:
                with self._lock:
                    self._local.dir_sync.failed(dir_sync)
                    if epochs:
                        self.epoch_cache.mark_unsynced()
                raise
            with self._lock:
                if self.topic_id == topic_id:
                    self._metadata_dirty = False
                self._local.dir_sync.parent_synced()

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        local = self._local
        if not local.open_segments():
            start = max(log_start_offset, 0)
            local.start_at(start)
            self._log_start_offset = start
            self.epoch_cache.clear()
            return
        if self.epoch_cache.unreadable:
            # epochs of flushed segments are lost with the file: rebuild them all
            log.warning("%s: recovering the whole log to rebuild its leader epochs", self.name)
            clean_shutdown = False
            recovery_point = 0
        if clean_shutdown:
            clean_shutdown = local.load_clean_tail()
        if not clean_shutdown:
            first_recovered, epochs = local.recover_from(recovery_point)
            self.epoch_cache.truncate_from_end(first_recovered)
            for epoch, start_offset in epochs:
                if epoch > self.epoch_cache.latest_epoch:
                    self.epoch_cache.assign(epoch, start_offset)
        leo = local.log_end_offset
        local.loaded(recovery_point if clean_shutdown else leo)
        # a tiered log starts where its remote tier starts, below its first local segment
        floor = 0 if self.tiered else local.start_offset
        self._log_start_offset = max(log_start_offset, floor)
        if self._log_start_offset > leo:
            # everything below the checkpointed log start is logically deleted already
            log.warning(
                "%s: log start offset %d is past the log end %d; starting empty there",
                self.name,
                self._log_start_offset,
                leo,
            )
            self._truncate_fully(self._log_start_offset)
            return
        self.epoch_cache.truncate_from_end(leo)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
