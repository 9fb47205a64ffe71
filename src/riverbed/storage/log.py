"""PartitionLog: the on-disk log of one partition replica.

Directory ``<log dir>/<topic>-<partition>/`` holds the segments
(:mod:`riverbed.storage.segment`), ``leader-epoch-checkpoint``
(:mod:`riverbed.storage.epoch_cache`) and ``partition.metadata``
(:mod:`riverbed.storage.checkpoints`). The per-dir checkpoints (recovery point, log start
offset, high watermark) are the :class:`~riverbed.storage.log_manager.LogManager`'s; a
standalone log takes them as constructor arguments.

Offsets: ``log_start_offset <= high_watermark <= log_end_offset``; the recovery point is
the offset below which everything is known to be fsynced.

Appends work on whole batches (DESIGN principle 2): a leader validates each batch's header
and CRC, assigns offsets and its leader epoch by patching the bytes in place, stamps
LogAppendTime when the topic asks for it (``max(last appended LogAppendTime, now)``, so
log timestamps never go backwards across leader changes, KIP-32), enforces the CreateTime
bounds (from the batch header where that is sound, decoding record timestamps only where
it is not: the rule is in :mod:`riverbed.storage.timestamp_bounds`), and writes the bytes
as they came. A follower appends the leader's batches unchanged.

Reads return :class:`FileRange` s of whole batches for ``sendfile``. Retention, roll,
truncation and recovery follow Kafka and the KIP-32 seed: time-based roll measures from
the first batch's timestamp, time-based retention from a segment's largest timestamp.

Code layout: state, loading and recovery in :mod:`riverbed.storage.log_base`, reads in
:mod:`riverbed.storage.log_reads`, retention in :mod:`riverbed.storage.log_retention`;
appends, truncation and flushing here.

Locking: every public method takes the log's lock; :meth:`PartitionLog.flush` holds it
only to pick the files and to advance the recovery point, the fsyncs run unlocked (on
duplicated file descriptors) so a flush in the manager's thread pool never stalls appends.
The lock is the log's own: code outside storage never takes it, it asks for an operation
that runs its change under it (``attach_producer_state``, ``update_producer_state``,
``replace_with``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    Buffer,
    check_dense_offsets,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
    validate_batch,
)
from riverbed.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
)
from riverbed.storage.clock import Clock
from riverbed.storage.config import LogConfig
from riverbed.storage.epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from riverbed.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetOutOfRangeError,
    RecordError,
    RecordTooLargeError,
)
from riverbed.storage.file_io import OS_FILE_IO, FileIO
from riverbed.storage.log_base import LOADED_INDEXES_MAX, RetentionHook
from riverbed.storage.log_cleaning import LogCleaning
from riverbed.storage.log_dir import LogDir
from riverbed.storage.log_files import FileRange, ReadResult, SegmentFiles, TimestampOffset
from riverbed.storage.log_reads import LogReads
from riverbed.storage.log_retention import LogRetention
from riverbed.storage.log_txns import LogTxns
from riverbed.storage.producer_hook import DuplicateBatch, ProducerStateHook, txn_marker_of
from riverbed.storage.record_checks import (
    TimestampBounds,
    batch_record_errors,
    record_validation_error,
)
from riverbed.storage.segment import LogSegment, SegmentBatch
from riverbed.storage.time_index import NO_TIMESTAMP

T = TypeVar("T")

__all__ = [
    "LOADED_INDEXES_MAX",
    "AppendInfo",
    "FileRange",
    "PartitionLog",
    "ReadResult",
    "RetentionHook",
    "TimestampOffset",
]

log = logging.getLogger(__name__)

_INT32: Final = struct.Struct(">i")
ORIGIN_CLIENT: Final = "client"
ORIGIN_COORDINATOR: Final = "coordinator"


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did (ProduceResponse needs base offset, log append time, log start)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int  # -1 unless the log stamped LogAppendTime
    log_start_offset: int
    records_count: int
    valid_bytes: int
    batches: tuple[BatchHeader, ...] = field(repr=False)
    flush_needed: bool = False  # flush.messages reached: caller should schedule a flush
    #: True: the batch repeats one appended before (idempotent retry); first/last offset
    #: are the original batch's and nothing was appended
    duplicate: bool = False


def _batch_view(buf: bytearray, pos: int, h: BatchHeader) -> memoryview:
    return memoryview(buf)[pos : pos + h.size]


class PartitionLog(LogReads, LogRetention, LogCleaning, LogTxns):
    """The segments of one partition and the offsets, epochs and timestamps over them."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        clock: Clock,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int = 0,
        clean_shutdown: bool = False,
        topic_id: str | None = None,
        retention_hook: RetentionHook | None = None,
        rng: random.Random | None = None,
        io: FileIO = OS_FILE_IO,
        log_dir: LogDir | None = None,
        remote_log_enabled: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.remote_log_enabled = remote_log_enabled
        self._highest_offset_in_remote = -1
        self._records_deleted_before = -1
        self.roll_listener = None
        self._io = io
        # a standalone log (the metadata log, tests) is the only user of its dir's state
        self.log_dir = log_dir if log_dir is not None else LogDir(self.directory.parent)
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.retention_hook = retention_hook
        self.producer_state: ProducerStateHook | None = None  # attach_producer_state
        self._lock = threading.RLock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._files = SegmentFiles(self.directory, io)
        self._truncations = 0  # bumped by every truncation (flush must not cover new data)
        self._roll_flush_pending = False
        self._loaded: OrderedDict[int, LogSegment] = OrderedDict()
        self._unflushed_messages = 0
        self._last_flush_ms = clock.now_ms()
        self._closed = False
        # segment.jitter.ms draws (injected for deterministic tests)
        self._rng = rng if rng is not None else random.Random()
        self._metadata_dirty = False
        self._dir_sync_pending = False
        self._metadata_lock = threading.Lock()
        try:
            self.directory.mkdir(parents=True)
            self._parent_sync_pending = True  # the new dir's entry is not durable yet
        except FileExistsError:
            self._parent_sync_pending = False
        self.topic_id = self._init_topic_id(topic_id)
        self.epoch_cache = LeaderEpochCache(
            self.directory / LEADER_EPOCH_CHECKPOINT, sync_assign=False, io=io
        )
        self._load(recovery_point, log_start_offset, clean_shutdown)
        self._high_watermark = min(max(high_watermark, self._log_start_offset), self.log_end_offset)
        self._last_append_time: int | None = None  # read back on first use

    # ---- offsets and config --------------------------------------------------------------

    def update_high_watermark(self, offset: int) -> int:
        """Set the high watermark (clamped to [log start, log end]); returns it."""
        with self._lock:
            self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)
            return self._high_watermark

    def assign_topic_id(self, topic_id: str) -> None:
        """Record the topic id (Kafka's ``assignTopicId``); written on the next flush."""
        with self._lock:
            if topic_id != self.topic_id:
                self.topic_id = topic_id
                self._metadata_dirty = True

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            self.active_segment.index_interval_bytes = config.index_interval_bytes

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (see LeaderEpochCache)."""
        with self._lock:
            return self.epoch_cache.end_offset_for(epoch, self.log_end_offset)

    # ---- leader epochs (the cache has its own lock; Kafka's UnifiedLog over its cache) ---

    def last_record_epoch(self) -> int:
        """The leader epoch of the last record (UNDEFINED_EPOCH for an empty log), read
        atomically with the log's end and start."""
        with self._lock:
            end = self.log_end_offset
            if end <= self._log_start_offset:
                return UNDEFINED_EPOCH
            return self.epoch_cache.epoch_for_offset(end - 1)

    def assign_epoch_start(self, epoch: int, start_offset: int) -> None:
        """Kafka's ``maybeAssignEpochStartOffset``: a leader's epoch starts at
        ``start_offset`` (its log end when it takes over)."""
        self.epoch_cache.assign(epoch, start_offset)

    def forget_epochs_from(self, offset: int) -> None:
        """Drop the epochs that start at or after ``offset`` (a follower truncating)."""
        self.epoch_cache.truncate_from_end(offset)

    def epoch_entries(self) -> list[tuple[int, int]]:
        """(epoch, start offset) of every known leader epoch, oldest first."""
        return self.epoch_cache.entries()

    # ---- changes beside the log, atomic with it -----------------------------------------
    # Other layers never take the log's lock: they ask for one of these operations, each
    # of which runs the caller's change under it (nothing appended, truncated, rolled or
    # deleted meanwhile). The change must be quick and must not wait for another log.

    def attach_producer_state(
        self, hook: ProducerStateHook, rebuild: Callable[[int, int], None]
    ) -> None:
        """``rebuild(log start offset, log end offset)`` the producer state kept beside
        this log, then attach it as the hook that follows every later change."""
        with self._lock:
            rebuild(self._log_start_offset, self.log_end_offset)
            self.producer_state = hook

    def update_producer_state(self, change: Callable[[], T]) -> T:
        """``change()`` of the attached producer state, atomic with the log as every hook
        call is (Kafka's UnifiedLog changes its ProducerStateManager under its lock)."""
        with self._lock:
            return change()

    def replace_with(self, swap: Callable[[], T]) -> T:
        """``swap()`` while every change to this log waits: a replica move copies the last
        batches to its future log and closes this one (AlterReplicaLogDirs)."""
        with self._lock:
            return swap()

    # ---- appending -----------------------------------------------------------------------

    def append_as_leader(
        self, batches: Buffer, leader_epoch: int, *, origin: str = ORIGIN_CLIENT
    ) -> AppendInfo:
        """Validate, assign offsets + epoch (+ LogAppendTime) in place, and append.

        ``batches`` is patched in place when it is a writable buffer (a produce request's
        records field); ``bytes`` are copied once. Nothing is appended if any batch is bad.
        """
        buf = batches if isinstance(batches, bytearray) else bytearray(batches)
        with self._lock:
            self._check_open()
            now = self.clock.now_ms()
            found = self._validate_leader_batches(buf, now, origin)
            if self.producer_state is not None:
                markers = [txn_marker_of(_batch_view(buf, pos, h), h) for pos, h in found]
                dup = self.producer_state.check_leader_append(
                    [h for _, h in found], markers, sequences=origin == ORIGIN_CLIENT
                )
                if dup is not None:
                    return self._duplicate_info(dup)
            offset = self.log_end_offset
            log_append_time = NO_TIMESTAMP
            if self.config.log_append_time:
                log_append_time = max(self._known_last_append_time(), now)
            patched: list[SegmentBatch] = []
            for pos, h in found:
                patch_base_offset(buf, pos, offset)
                patch_partition_leader_epoch(buf, pos, leader_epoch)
                if log_append_time != NO_TIMESTAMP:
                    set_log_append_time(buf, pos, log_append_time)
                patched.append(SegmentBatch(pos, parse_header(buf, pos)))
                offset += h.last_offset_delta + 1
            try:
                self.epoch_cache.assign(leader_epoch, self.log_end_offset)
            except OSError as e:
                raise self.log_dir.fail(f"{self.name}: leader epoch checkpoint", e) from e
            info = self._append(buf, patched, now, log_append_time)
            return info

    def _duplicate_info(self, dup: DuplicateBatch) -> AppendInfo:
        stamped = dup.timestamp if self.config.log_append_time else NO_TIMESTAMP
        return AppendInfo(
            first_offset=dup.first_offset,
            last_offset=dup.last_offset,
            max_timestamp=dup.timestamp,
            offset_of_max_timestamp=dup.last_offset,
            log_append_time=stamped,
            log_start_offset=self._log_start_offset,
            records_count=0,
            valid_bytes=0,
            batches=(),
            duplicate=True,
        )

    def _validate_leader_batches(
        self, buf: bytearray, now: int, origin: str
    ) -> list[tuple[int, BatchHeader]]:
        found = self._validate_batches(buf, allow_partial_tail=False)
        if not found:
            raise InvalidRecordError(f"{self.name}: produce request holds no record batches")
        cfg = self.config
        bounds = None
        if not cfg.log_append_time:
            before, after = cfg.message_timestamp_before_max_ms, cfg.message_timestamp_after_max_ms
            bounds = TimestampBounds(now, before, after)
        record_errors: list[RecordError] = []
        any_timestamp, index = False, 0
        for pos, h in found:
            try:
                check_dense_offsets(h)
            except ProtocolError as e:
                raise InvalidRecordError(f"{self.name}: {e}") from None
            if h.records_count == 0:
                raise InvalidRecordError(f"{self.name}: record batch with no records")
            if h.is_control and origin == ORIGIN_CLIENT:
                raise InvalidRecordError(f"{self.name}: clients may not write control batches")
            if bounds is not None and h.timestamp_type != 0 and origin == ORIGIN_CLIENT:
                raise InvalidTimestampError(
                    f"{self.name}: batch claims LogAppendTime but the topic uses CreateTime"
                )
            errors, timestamp = batch_record_errors(
                buf, pos, h, self.name, compacted=cfg.compact_enabled, bounds=bounds
            )
            # indices count the records of every batch of the request (one batch: KIP-467's)
            record_errors += [RecordError(index + e.batch_index, e.message) for e in errors]
            any_timestamp |= timestamp
            index += h.records_count
        if record_errors:
            raise record_validation_error(record_errors, bounds, any_timestamp)
        return found

    def _validate_batches(
        self, buf: bytearray, *, allow_partial_tail: bool
    ) -> list[tuple[int, BatchHeader]]:
        found: list[tuple[int, BatchHeader]] = []
        pos = 0
        end = len(buf)
        limit = self.config.max_message_bytes
        while pos < end:
            if allow_partial_tail:
                # a fetch response may end with a partial batch: leave it for next time
                if end - pos < LOG_OVERHEAD:
                    break
                (length,) = _INT32.unpack_from(buf, pos + 8)
                if pos + LOG_OVERHEAD + length > end:
                    break
            try:
                h = validate_batch(buf, pos)
            except ProtocolError as e:
                raise CorruptRecordError(f"{self.name}: {e}") from None
            if h.size > limit:
                raise RecordTooLargeError(
                    f"{self.name}: record batch of {h.size} bytes exceeds "
                    f"max.message.bytes ({limit})"
                )
            found.append((pos, h))
            pos += h.size
        return found

    def append_as_follower(self, batches: Buffer) -> AppendInfo:
        """Append the leader's batches unchanged (offsets, epochs and timestamps kept).

        A trailing partial batch (a fetch response may end with one) is ignored.
        """
        buf = batches if isinstance(batches, bytearray) else bytearray(batches)
        with self._lock:
            self._check_open()
            now = self.clock.now_ms()
            found = self._validate_batches(buf, allow_partial_tail=True)
            expected = self.log_end_offset
            for _, h in found:
                if h.base_offset < expected:
                    raise InvalidRecordError(
                        f"{self.name}: follower batch at offset {h.base_offset} does not "
                        f"follow {expected} (out of order or already appended)"
                    )
                expected = h.next_offset
            with self._failing_dir("leader epoch checkpoint"):
                for _, h in found:
                    self._assign_epoch_from_batch(h)
            batches_found = [SegmentBatch(pos, h) for pos, h in found]
            return self._append(buf, batches_found, now, NO_TIMESTAMP)

    def _should_roll(self, seg: LogSegment, h: BatchHeader, now: int) -> bool:
        if seg.size == 0:
            return False
        cfg = self.config
        if seg.size + h.size > cfg.segment_bytes:
            return True
        if seg.indexes_full() or not seg.can_hold_offset(h.last_offset):
            return True
        # segment.ms per KIP-32: measured by record time from the first batch's timestamp
        # (Kafka's rule); segments without timestamps fall back to their creation time
        if seg.rolling_based_timestamp >= 0 and h.max_timestamp >= 0:
            waited = h.max_timestamp - seg.rolling_based_timestamp
        else:
            waited = now - seg.created_ms
        return waited > cfg.segment_ms - seg.roll_jitter_ms

    def _append(
        self, buf: bytearray, batches: list[SegmentBatch], now: int, log_append_time: int
    ) -> AppendInfo:
        if not batches:
            leo = self.log_end_offset
            return AppendInfo(leo, leo - 1, NO_TIMESTAMP, -1, -1, self._log_start_offset, 0, 0, ())
        mv = memoryview(buf)
        max_ts, max_ts_offset, count = NO_TIMESTAMP, -1, 0
        producer_state = self.producer_state
        for b in batches:
            h = b.header
            try:
                seg = self.active_segment
                if seg.size == 0 and not seg.can_hold_offset(h.last_offset):
                    seg = self._replace_empty_active(h.base_offset)
                elif self._should_roll(seg, h, now):
                    seg = self._roll(h.base_offset)
                seg.append(mv[b.position : b.position + h.size], h)
            except OSError as e:
                # never retried: the dir goes offline (a partial batch was cut off, and
                # recovery cuts whatever a crash leaves)
                raise self.log_dir.fail(f"{self.name}: append", e) from e
            if producer_state is not None:
                self._on_batch(producer_state, seg, mv[b.position : b.position + h.size], h)
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
            count += h.records_count
            stamped = self._last_append_time
            if h.timestamp_type == 1 and stamped is not None and h.max_timestamp > stamped:
                self._last_append_time = h.max_timestamp
        self._unflushed_messages += count
        first = batches[0].header
        last = batches[-1].header
        return AppendInfo(
            first_offset=first.base_offset,
            last_offset=last.last_offset,
            max_timestamp=max_ts,
            offset_of_max_timestamp=max_ts_offset,
            log_append_time=log_append_time,
            log_start_offset=self._log_start_offset,
            records_count=count,
            valid_bytes=batches[-1].position + last.size - batches[0].position,
            batches=tuple(b.header for b in batches),
            flush_needed=self._unflushed_messages >= self.config.flush_messages,
        )

    def _on_batch(
        self, producer_state: ProducerStateHook, seg: LogSegment, batch: memoryview, h: BatchHeader
    ) -> None:
        """The producer state follows the batch; an ABORT that ended a transaction with
        data goes to the ``.txnindex`` of the segment holding the marker (Kafka's
        ``segment.updateTxnIndex``)."""
        try:
            marker = txn_marker_of(batch, h)
        except CorruptRecordError as e:  # a replicated marker (the leader's were checked)
            log.warning("%s: %s", self.name, e)
            marker = None
        aborted = producer_state.on_batch(h, marker)
        if aborted is not None:
            try:
                seg.txn_index.append(aborted)
            except OSError as e:
                raise self.log_dir.fail(f"{self.name}: txn index", e) from e

    def _replace_empty_active(self, base_offset: int) -> LogSegment:
        # an empty active segment whose 32-bit relative offsets cannot reach the batch
        # (a follower jumping ahead) is replaced by one based at the batch
        old = self._segments.pop()
        self._bases.pop()
        old.delete_files()
        seg = self._new_segment(base_offset)
        self._append_segment(seg)
        if len(self._segments) == 1:
            # the log held nothing: it now starts at the batch (as after
            # truncate_fully_and_start_at), keeping log start >= first segment base
            self._log_start_offset = max(self._log_start_offset, base_offset)
            self._high_watermark = max(self._high_watermark, self._log_start_offset)
            self._recovery_point = max(self._recovery_point, self._log_start_offset)
        return seg

    def roll(self) -> LogSegment:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            if self.active_segment.size == 0:
                return self.active_segment
            with self._failing_dir("roll"):
                return self._roll(self.log_end_offset)

    # ---- truncation ------------------------------------------------------------------------

    @property
    def truncations(self) -> int:
        """How many truncations this log has seen (a copy of it restarts after one)."""
        return self._truncations

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch ending at or after ``offset`` (follower divergence).

        Returns True when anything was removed. A batch containing ``offset`` goes
        entirely, so the log end can end up below ``offset``.
        """
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.name}: cannot truncate to {offset}")
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return False
            with self._failing_dir(f"truncate to {offset}"):
                self._truncate_locked(offset)
            return True

    def _truncate_locked(self, offset: int) -> None:
        self._last_append_time = None  # read back again: its batch may be gone
        if offset < self._segments[0].base_offset:
            self._truncate_fully(offset)
            return
        self._truncations += 1
        i = self._segment_index_for(offset)
        for seg in self._segments[i + 1 :]:
            self._schedule_delete(seg)
        del self._segments[i + 1 :], self._bases[i + 1 :]
        seg = self._segments[i]
        seg.active = True
        seg.truncate_to(offset)
        if seg.size == 0 and i > 0:
            # an emptied segment goes too, so the log end is where the data ends
            self._schedule_delete(seg)
            del self._segments[i], self._bases[i]
            seg = self._segments[i - 1]
            seg.active = True
            seg.load_tail_state()
        leo = self.log_end_offset
        self.epoch_cache.truncate_from_end(leo)
        self._log_start_offset = min(self._log_start_offset, leo)
        self._high_watermark = min(self._high_watermark, leo)
        self._recovery_point = min(self._recovery_point, leo)
        if self.producer_state is not None:
            self.producer_state.on_truncate(self._log_start_offset, leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and restart the (empty) log at ``offset``."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.name}: cannot start at {offset}")
        with self._lock:
            self._check_open()
            with self._failing_dir(f"restart at {offset}"):
                self._truncate_fully(offset)

    def _truncate_fully(self, offset: int) -> None:
        self._truncations += 1
        self._last_append_time = None
        for seg in self._segments:
            self._schedule_delete(seg)
        self._segments.clear()
        self._bases.clear()
        self._append_segment(self._new_segment(offset))
        self.epoch_cache.clear()
        self._log_start_offset = offset
        self._high_watermark = offset
        self._recovery_point = offset
        self._unflushed_messages = 0
        if self.producer_state is not None:
            self.producer_state.on_truncate_fully(offset)

    # ---- durability and lifetime ---------------------------------------------------------

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    def flush_due(self, now_ms: int) -> bool:
        """True when flush.messages / flush.ms or a rolled segment asks for an fsync."""
        cfg = self.config
        if self._closed or self.log_dir.offline:
            return False
        if self._roll_flush_pending:
            return True
        if self._recovery_point >= self.log_end_offset:
            return False
        return (
            self._unflushed_messages >= cfg.flush_messages
            or now_ms - self._last_flush_ms >= cfg.flush_ms
        )

    def flush(self, up_to: int | None = None, *, all_indexes: bool = False) -> int:
        """fsync everything below ``up_to`` (default: the log end); returns the recovery point.

        Synced: the ``.log`` of every segment holding data past the recovery point, and
        the indexes of segments rolled since their last sync. The active segment's
        indexes only with ``all_indexes`` (close does that): after a crash the segment
        holding the recovery point is re-indexed from its ``.log`` anyway.

        A failed write or fsync takes the log dir offline (LogDirError) and the recovery
        point never moves again: a later fsync may "succeed" over pages the kernel dropped.
        One flush at a time, so no flush can count fsyncs that ran after another failed.
        """
        with self._flush_lock:
            return self._flush(up_to, all_indexes)

    def _flush(self, up_to: int | None, all_indexes: bool) -> int:
        with self._lock:
            if self._closed:
                return self._recovery_point
            self.log_dir.check(self.name)
            target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
            truncations = self._truncations
            fds: list[int] = []
            synced: list[LogSegment] = []
            for seg in self._segments:
                has_data = (
                    target > self._recovery_point
                    and seg.next_offset > self._recovery_point
                    and seg.base_offset < target
                )
                indexes = all_indexes or (not seg.active and seg.index_sync_pending)
                if has_data or (indexes and seg.size):  # an empty segment has nothing
                    try:  # (writes pending index entries first)
                        fds += seg.dup_fds(with_indexes=indexes)
                    except OSError as e:
                        self._close_fds(fds)
                        raise self.log_dir.fail(f"{self.name}: flush", e) from e
                    synced.append(seg)
            if not synced:
                self._roll_flush_pending = False
        try:
            for fd in fds:
                self._io.fsync(fd)
            # new segment files and a new partition dir must be findable after a crash
            # before the recovery point may cover them; partition.metadata goes too
            self._flush_metadata()
        except OSError as e:
            raise self.log_dir.fail(f"{self.name}: fsync", e) from e
        finally:
            self._close_fds(fds)
        if not synced:
            return self._recovery_point
        with self._lock:
            if self._truncations == truncations and not self.log_dir.offline:
                for seg in synced:
                    if all_indexes or not seg.active:
                        seg.index_sync_pending = False
                if target > self._recovery_point:
                    self._recovery_point = target
                if self._recovery_point >= self.log_end_offset:
                    self._unflushed_messages = 0
                self._roll_flush_pending = any(
                    s.index_sync_pending for s in self._segments if not s.active
                )
            self._last_flush_ms = self.clock.now_ms()
            for seg in synced:
                if not seg.active:
                    seg.close_files()  # bound open files: inactive segments reopen on read
            return self._recovery_point

    def _close_fds(self, fds: list[int]) -> None:
        for fd in fds:
            with contextlib.suppress(OSError):
                self._io.close(fd)

    def close(self, *, flush: bool = True, sync_parent_dir: bool = True) -> None:
        """Flush (unless told not to), write the final time index entry, close files.

        ``sync_parent_dir=False``: the caller fsyncs the log dir holding this partition
        dir itself afterwards (the LogManager does it once per log dir at shutdown).
        A log whose dir is offline writes nothing: its fds are just closed.
        """
        if self.log_dir.offline:
            self.abandon()
            return
        with self._lock:
            if self._closed:
                return
            with self._failing_dir("close"):
                self.active_segment.on_become_inactive()
                if flush and self.producer_state is not None:
                    self.producer_state.on_close(self.log_end_offset)
            if not sync_parent_dir:
                self._parent_sync_pending = False
        if flush:
            self.flush(all_indexes=True)
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.close_files()

    def abandon(self) -> None:
        """Close file descriptors without writing anything (a simulated crash)."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                with contextlib.suppress(OSError):  # a failed disk may refuse even this
                    seg.discard_files()

    def delete_files_now(self) -> None:
        """Remove every file of this log, including pending ``.deleted`` ones."""
        with self._lock:
            self._closed = True
            for seg in self._segments:
                seg.delete_files()
            self._files.delete_expired(None)

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self._log_start_offset}, "
            f"hw={self._high_watermark}, end={self.log_end_offset}, "
            f"segments={len(self._segments)})"
        )
