"""LogBase: the state of a partition log, its loading and recovery, shared helpers.

:class:`~riverbed.storage.log.PartitionLog` is assembled from this base and two mixins,
:mod:`riverbed.storage.log_reads` (reads, timestamp lookups) and
:mod:`riverbed.storage.log_retention` (retention, DeleteRecords); the module docstring of
:mod:`riverbed.storage.log` describes the whole.

Loading (at construction): leftover files are removed, segments listed by their
20-digit names; after a clean shutdown the active segment's tail state is read from its
indexes plus a short header scan, otherwise every segment from the one holding the
recovery point on is validated batch by batch (length, CRC, offsets), the first invalid
batch and everything after it truncated, indexes and leader epochs rebuilt, and the
recovered segments fsynced. A checkpointed log start offset past the log end restarts
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

import bisect
import contextlib
import logging
import random
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from riverbed.protocol.exceptions import ProtocolError
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
from riverbed.storage.errors import LogDirError
from riverbed.storage.file_io import FileIO
from riverbed.storage.log_dir import LogDir
from riverbed.storage.log_files import SegmentFiles
from riverbed.storage.producer_hook import ProducerStateHook
from riverbed.storage.segment import LogSegment
from riverbed.storage.time_index import NO_TIMESTAMP

__all__ = ["LOADED_INDEXES_MAX", "LogBase", "RetentionHook"]

log = logging.getLogger("riverbed.storage.log")

# Inactive segments per log whose index mirrors stay in memory (an LRU).
LOADED_INDEXES_MAX: Final = 8
# Decides whether a segment may be deleted by retention (False = keep it for now), e.g.
# tiered storage vetoing segments not yet copied to the remote tier. Called with the
# PartitionLog and the segment.
RetentionHook = Callable[[Any, LogSegment], bool]


class LogBase:
    """State of one partition log plus what every part of it needs."""

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
    _io: FileIO
    _lock: threading.RLock
    _flush_lock: threading.Lock  # one flush at a time (its fsyncs run outside _lock)
    _segments: list[LogSegment]
    _bases: list[int]
    _files: SegmentFiles
    _loaded: OrderedDict[int, LogSegment]
    _truncations: int
    _roll_flush_pending: bool
    _unflushed_messages: int
    _last_flush_ms: int
    _closed: bool
    _log_start_offset: int
    _high_watermark: int
    _recovery_point: int
    _last_append_time: int | None  # None: not read back from the log yet
    _rng: random.Random
    _metadata_dirty: bool  # partition.metadata to write on the next flush/close
    _dir_sync_pending: bool  # files created in the partition dir since its last fsync
    _parent_sync_pending: bool  # the partition dir itself is new in its parent
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

    # ---- identity and offsets ------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _new_segment(self, base_offset: int) -> LogSegment:
        seg = LogSegment.create(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=self.clock.now_ms(),
            io=self._io,
        )
        seg.roll_jitter_ms = self._random_segment_jitter()
        self._dir_sync_pending = True
        return seg

    def _random_segment_jitter(self) -> int:
        """Kafka's ``randomSegmentJitter``: uniform in [0, min(jitter, segment.ms))."""
        bound = min(self.config.segment_jitter_ms, self.config.segment_ms)
        return self._rng.randrange(bound) if bound > 0 else 0

    def _append_segment(self, seg: LogSegment) -> None:
        assert not self._bases or seg.base_offset > self._bases[-1]
        if self._segments:
            self._segments[-1].active = False
        seg.active = True
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

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
        return max(self._log_start_offset, self._segments[0].base_offset)

    @property
    def highest_offset_in_remote(self) -> int:
        return self._highest_offset_in_remote

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def last_append_time(self) -> int:
        """The newest LogAppendTime stamped in this log (-1 when there is none)."""
        with self._lock:
            return self._known_last_append_time()

    def _known_last_append_time(self) -> int:
        if self._last_append_time is None:
            self._last_append_time = self._recover_last_append_time()
        return self._last_append_time

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    def _release(self, seg: LogSegment) -> None:
        """After using an inactive segment: close its files, bound the loaded indexes.

        At most ``LOADED_INDEXES_MAX`` inactive segments keep their index mirrors in
        memory (least recently used go first; they are re-read on next use).
        """
        if seg.active:
            return
        seg.close_files()
        self._loaded.pop(seg.base_offset, None)
        self._loaded[seg.base_offset] = seg
        while len(self._loaded) > LOADED_INDEXES_MAX:
            _, old = self._loaded.popitem(last=False)
            if not old.active:
                old.unload_indexes()

    def _roll(self, base_offset: int) -> LogSegment:
        old = self.active_segment
        assert base_offset >= old.next_offset, (base_offset, old)
        old.on_become_inactive()
        seg = self._new_segment(base_offset)
        self._append_segment(seg)
        self._roll_flush_pending = True
        if self.producer_state is not None:
            self.producer_state.on_roll(base_offset)  # a producer snapshot per segment
        log.debug("%s: rolled new segment at %d", self.name, base_offset)
        if self.roll_listener is not None:
            self.roll_listener(base_offset)
        return seg

    def _schedule_delete(self, seg: LogSegment) -> None:
        if self._loaded.get(seg.base_offset) is seg:
            del self._loaded[seg.base_offset]
        self._files.schedule_delete(seg, self.clock.now_ms() + self.config.file_delete_delay_ms)

    @contextlib.contextmanager
    def _failing_dir(self, what: str) -> Iterator[None]:
        """An OSError inside takes the log dir offline (see riverbed.storage.log_dir)."""
        try:
            yield
        except OSError as e:
            raise self.log_dir.fail(f"{self.name}: {what}", e) from e

    def _check_open(self) -> None:
        self.log_dir.check(self.name)
        if self._closed:
            raise LogDirError(f"{self.name}: log is closed")

    def _assign_epoch_from_batch(self, h: BatchHeader) -> None:
        if h.partition_leader_epoch > self.epoch_cache.latest_epoch:
            self.epoch_cache.assign(h.partition_leader_epoch, h.base_offset)

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
                dir_sync, parent_sync = self._dir_sync_pending, self._parent_sync_pending
                self._dir_sync_pending = False
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
                    self._dir_sync_pending = self._dir_sync_pending or dir_sync
                    if epochs:
                        self.epoch_cache.mark_unsynced()
                raise
            with self._lock:
                if self.topic_id == topic_id:
                    self._metadata_dirty = False
                self._parent_sync_pending = False

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        now = self.clock.now_ms()
        bases = self._files.clean_and_list()
        for base in bases:
            seg = LogSegment.open_existing(
                self.directory,
                base,
                index_interval_bytes=self.config.index_interval_bytes,
                max_index_bytes=self.config.segment_index_bytes,
                created_ms=now,
                io=self._io,
            )
            seg.roll_jitter_ms = self._random_segment_jitter()
            self._segments.append(seg)
            self._bases.append(base)
        if not self._segments:
            start = max(log_start_offset, 0)
            self._append_segment(self._new_segment(start))
            self._log_start_offset = start
            self._recovery_point = start
            self.epoch_cache.clear()
            return
        if self.epoch_cache.unreadable:
            # epochs of flushed segments are lost with the file: rebuild them all
            log.warning("%s: recovering the whole log to rebuild its leader epochs", self.name)
            clean_shutdown = False
            recovery_point = 0
        if clean_shutdown:
            self.active_segment.active = True
            try:
                self.active_segment.load_tail_state()
            except ProtocolError as e:
                # a "clean" log whose tail does not parse: trust nothing after the
                # recovery point and recover as after a crash
                log.warning("%s: unreadable tail despite clean shutdown: %s", self.name, e)
                clean_shutdown = False
        if not clean_shutdown:
            self._recover_from(recovery_point)
        leo = self.log_end_offset
        self._recovery_point = leo if not clean_shutdown else min(max(recovery_point, 0), leo)
        first_base = self._segments[0].base_offset
        # a tiered log starts where its remote tier starts, below its first local segment
        floor = 0 if self.tiered else first_base
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

    def _recover_from(self, recovery_point: int) -> None:
        """Unclean start: validate segments from the one holding the recovery point on."""
        i = max(bisect.bisect_right(self._bases, recovery_point) - 1, 0)
        first_recovered = self._segments[i].base_offset
        self.epoch_cache.truncate_from_end(first_recovered)
        last = len(self._segments) - 1
        self._segments[last].active = True
        while i < len(self._segments):
            seg = self._segments[i]
            if i > 0 and seg.base_offset < self._segments[i - 1].next_offset:
                # would overlap the previous segment: everything from here on is garbage
                self._drop_segments_from(i)
                break
            truncated = seg.recover(self._assign_epoch_from_batch)
            if truncated:
                log.warning(
                    "%s: recovery truncated %d invalid bytes of %s",
                    self.name,
                    truncated,
                    seg.log_path.name,
                )
            if truncated and i < len(self._segments) - 1:
                self._drop_segments_from(i + 1)
            if i < len(self._segments) - 1:
                seg.on_become_inactive()
            seg.flush()
            i += 1
        while len(self._segments) > 1 and self._segments[-1].size == 0:
            # an empty last segment (its data torn away) would put the log end at its
            # base offset, past the data when offsets have a gap: drop it
            seg = self._segments.pop()
            self._bases.pop()
            seg.delete_files()
        active = self._segments[-1]
        active.active = True
        active.load_tail_state()
        log.info(
            "%s: recovered from offset %d to log end %d",
            self.name,
            first_recovered,
            active.next_offset,
        )

    def _drop_segments_from(self, i: int) -> None:
        for seg in self._segments[i:]:
            log.warning("%s: deleting segment %s after invalid data", self.name, seg.log_path.name)
            seg.delete_files()
        del self._segments[i:], self._bases[i:]

    def _recover_last_append_time(self) -> int:
        # The last stamped LogAppendTime survives restarts and leader changes because it
        # is read back from the log: from LogAppendTime batches only. A CreateTime batch
        # carries a client's clock (maybe an hour ahead) and must not pin later stamps of
        # a topic switched to LogAppendTime. Read lazily, on the first LogAppendTime
        # append, so logs of CreateTime topics never pay for the scan.
        for seg in reversed(self._segments):
            if seg.size:
                found = seg.max_log_append_time()
                self._release(seg)
                if found != NO_TIMESTAMP:
                    return found
        return NO_TIMESTAMP
