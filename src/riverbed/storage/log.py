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

Code layout (Kafka's split): :class:`~riverbed.storage.local_log.LocalLog` holds the
segments and only them (load and recovery of the segment files, append at a given offset,
read, roll, truncate, flush and the recovery point, deletion, size); this class is the
unified log over it (Kafka's ``UnifiedLog``): the high watermark, the log start offset,
the producer state hook, the leader epoch cache, the remote tier's offsets and the
validation of appends. Its state and reads are in :mod:`riverbed.storage.log_base`,
retention and DeleteRecords in :mod:`riverbed.storage.log_retention`, compaction in
:mod:`riverbed.storage.log_cleaning`, batch checks in :mod:`riverbed.storage.batch_checks`;
appends, truncation, flushing and closing here.

Locking: every public method takes the log's lock, and takes the local log's (a leaf
lock) only inside it, by calling the local log: the order is unified -> local, never the
reverse, and taking this lock while holding the local one raises
:class:`~riverbed.storage.locks.LockOrderError` (:mod:`riverbed.storage.locks`). Hooks,
listeners and the epoch cache are called under this lock only, never under the local
one. :meth:`PartitionLog.flush` holds the locks only to pick the files and to advance the
recovery point; the fsyncs run unlocked (on duplicated file descriptors) so a flush in the
manager's thread pool never stalls appends. The lock is the log's own: code outside
storage never takes it, it asks for an operation that runs its change under it
(``attach_producer_state``, ``update_producer_state``, ``replace_with``).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from riverbed.protocol.records import (
    BatchHeader,
    Buffer,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
)
from riverbed.storage.batch_checks import (
    ORIGIN_CLIENT,
    ORIGIN_COORDINATOR,
    validate_batches,
    validate_leader_batches,
)
from riverbed.storage.checkpoints import LEADER_EPOCH_CHECKPOINT
from riverbed.storage.clock import Clock
from riverbed.storage.config import LogConfig
from riverbed.storage.epoch_cache import UNDEFINED_EPOCH, LeaderEpochCache
from riverbed.storage.errors import CorruptRecordError, InvalidRecordError, OffsetOutOfRangeError
from riverbed.storage.file_io import OS_FILE_IO, FileIO
from riverbed.storage.local_log import LocalLog
from riverbed.storage.log_base import RetentionHook
from riverbed.storage.log_cleaning import LogCleaning
from riverbed.storage.log_dir import LogDir
from riverbed.storage.log_files import (
    LOADED_INDEXES_MAX,
    FileRange,
    ReadResult,
    Rolled,
    TimestampOffset,
)
from riverbed.storage.log_retention import LogRetention
from riverbed.storage.log_txns import LogTxns
from riverbed.storage.producer_hook import (
    DuplicateBatch,
    ProducerStateHook,
    TxnMarker,
    txn_marker_of,
)
from riverbed.storage.recompression import stored_batches
from riverbed.storage.segment import LogSegment, SegmentBatch
from riverbed.storage.time_index import NO_TIMESTAMP

T = TypeVar("T")

__all__ = [
    "LOADED_INDEXES_MAX",
    "ORIGIN_CLIENT",
    "ORIGIN_COORDINATOR",
    "AppendInfo",
    "FileRange",
    "PartitionLog",
    "ReadResult",
    "RetentionHook",
    "TimestampOffset",
]

log = logging.getLogger(__name__)


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


class _Unknown:
    """A batch whose marker is not decoded yet (a follower's append)."""


_UNKNOWN = _Unknown()


class PartitionLog(LogRetention, LogCleaning, LogTxns):
    """The unified log of one partition: the offsets, epochs, producer state and remote
    tier over its local log of segments (see the module docstring)."""

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
        # segment.jitter.ms draws (injected for deterministic tests); creates the dir
        self._local = LocalLog(
            self.directory,
            self.name,
            config,
            clock,
            io=io,
            rng=rng if rng is not None else random.Random(),
        )
        self._lock = self._local.outer_lock(self.name)
        self._flush_lock = threading.Lock()
        self._metadata_dirty = False
        self._metadata_lock = threading.Lock()
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
            self._local.update_config(config)

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
        ``start_offset`` (its log end when it takes over). A failed checkpoint write takes
        the log dir offline, as every write of the log does."""
        with self._failing_dir("leader epoch checkpoint"):
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
            found = validate_leader_batches(buf, self.name, self.config, now, origin)
            markers: list[TxnMarker | None] | None = None
            if self.producer_state is not None:
                markers = [txn_marker_of(_batch_view(buf, pos, h), h) for pos, h in found]
                dup = self.producer_state.check_leader_append(
                    [h for _, h in found], markers, sequences=origin == ORIGIN_CLIENT
                )
                if dup is not None:
                    return self._duplicate_info(dup)
            if self.config.compression_type != "producer":
                buf, found = stored_batches(buf, found, self.config, self.name)
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
            info = self._append(buf, patched, now, log_append_time, markers)
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

    def append_as_follower(self, batches: Buffer) -> AppendInfo:
        """Append the leader's batches unchanged (offsets, epochs and timestamps kept).

        A trailing partial batch (a fetch response may end with one) is ignored.
        """
        buf = batches if isinstance(batches, bytearray) else bytearray(batches)
        with self._lock:
            self._check_open()
            now = self.clock.now_ms()
            limit = self.config.max_message_bytes
            found = validate_batches(buf, self.name, limit, allow_partial_tail=True)
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

    def _append(
        self,
        buf: bytearray,
        batches: list[SegmentBatch],
        now: int,
        log_append_time: int,
        markers: list[TxnMarker | None] | None = None,
    ) -> AppendInfo:
        """``markers``: each batch's marker when the leader's checks decoded them already
        (a control batch is decoded once per append, not again for the producer state)."""
        if not batches:
            leo = self.log_end_offset
            return AppendInfo(leo, leo - 1, NO_TIMESTAMP, -1, -1, self._log_start_offset, 0, 0, ())
        mv = memoryview(buf)
        max_ts, max_ts_offset, count = NO_TIMESTAMP, -1, 0
        producer_state = self.producer_state
        for i, b in enumerate(batches):
            h = b.header
            try:
                rolled = self._local.append_batch(mv[b.position : b.position + h.size], h, now)
            except OSError as e:
                # never retried: the dir goes offline (a partial batch was cut off, and
                # recovery cuts whatever a crash leaves)
                raise self.log_dir.fail(f"{self.name}: append", e) from e
            if rolled is Rolled.ROLLED:
                self._after_roll(h.base_offset)
            elif rolled is Rolled.REPLACED:
                self._after_replaced_empty(h.base_offset)
            if producer_state is not None:
                batch = mv[b.position : b.position + h.size]
                known = _UNKNOWN if markers is None else markers[i]
                self._on_batch(producer_state, batch, h, known)
            if h.max_timestamp > max_ts:
                max_ts, max_ts_offset = h.max_timestamp, h.last_offset
            count += h.records_count
            stamped = self._last_append_time
            if h.timestamp_type == 1 and stamped is not None and h.max_timestamp > stamped:
                self._last_append_time = h.max_timestamp
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
            flush_needed=self._local.unflushed_messages >= self.config.flush_messages,
        )

    def _on_batch(
        self,
        producer_state: ProducerStateHook,
        batch: memoryview,
        h: BatchHeader,
        known: TxnMarker | _Unknown | None,
    ) -> None:
        """The producer state follows the batch; an ABORT that ended a transaction with
        data goes to the ``.txnindex`` of the segment holding the marker (Kafka's
        ``segment.updateTxnIndex``). ``known``: the batch's marker when already decoded."""
        if not isinstance(known, _Unknown):
            marker = known
        else:
            try:
                marker = txn_marker_of(batch, h)
            except CorruptRecordError as e:  # a replicated marker (the leader's were checked)
                log.warning("%s: %s", self.name, e)
                marker = None
        aborted = producer_state.on_batch(h, marker)
        if aborted is not None:
            try:
                self._local.append_txn_index(aborted)
            except OSError as e:
                raise self.log_dir.fail(f"{self.name}: txn index", e) from e

    def _after_replaced_empty(self, base_offset: int) -> None:
        if self._local.segment_count == 1:
            # the log held nothing: it now starts at the batch (as after
            # truncate_fully_and_start_at), keeping log start >= first segment base
            self._log_start_offset = max(self._log_start_offset, base_offset)
            self._high_watermark = max(self._high_watermark, self._log_start_offset)

    def _after_roll(self, base_offset: int) -> None:
        """A new segment starts at ``base_offset``: tell the hooks (under this lock)."""
        if self.producer_state is not None:
            self.producer_state.on_roll(base_offset)  # a producer snapshot per segment
        if self.roll_listener is not None:
            self.roll_listener(base_offset)

    def _roll(self, base_offset: int) -> LogSegment:
        seg = self._local.roll(base_offset)
        self._after_roll(base_offset)
        return seg

    def roll(self) -> LogSegment:
        """Start a new segment at the log end offset (no-op if the active one is empty)."""
        with self._lock:
            self._check_open()
            active = self._local.active_segment
            if active.size == 0:
                return active
            with self._failing_dir("roll"):
                return self._roll(self.log_end_offset)

    # ---- truncation ------------------------------------------------------------------------

    @property
    def truncations(self) -> int:
        """How many truncations this log has seen (a copy of it restarts after one)."""
        return self._local.truncations

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
        if offset < self._local.start_offset:
            self._truncate_fully(offset)
            return
        self._local.truncate_to(offset)
        leo = self.log_end_offset
        self.epoch_cache.truncate_from_end(leo)
        self._log_start_offset = min(self._log_start_offset, leo)
        self._high_watermark = min(self._high_watermark, leo)
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
        self._last_append_time = None
        self._local.truncate_fully(offset)
        self.epoch_cache.clear()
        self._log_start_offset = offset
        self._high_watermark = offset
        if self.producer_state is not None:
            self.producer_state.on_truncate_fully(offset)

    # ---- durability and lifetime ---------------------------------------------------------

    @property
    def unflushed_messages(self) -> int:
        return self._local.unflushed_messages

    def flush_due(self, now_ms: int) -> bool:
        """True when flush.messages / flush.ms or a rolled segment asks for an fsync."""
        if self.log_dir.offline:
            return False
        return self._local.flush_due(now_ms)

    def flush(self, up_to: int | None = None, *, all_indexes: bool = False) -> int:
        """fsync everything below ``up_to`` (default: the log end); returns the recovery point.

        Synced: the ``.log`` of every segment holding data past the recovery point, and
        the indexes of segments rolled since their last sync. The active segment's
        indexes only with ``all_indexes`` (close does that): after a crash the segment
        holding the recovery point is re-indexed from its ``.log``.

        A failed write or fsync takes the log dir offline (LogDirError) and the recovery
        point never moves again: a later fsync may "succeed" over pages the kernel dropped.
        One flush at a time, so no flush can count fsyncs that ran after another failed.
        """
        with self._flush_lock:
            local = self._local
            if local.closed:
                return local.recovery_point
            self.log_dir.check(self.name)
            with self._failing_dir("flush"):
                plan = local.begin_flush(up_to, all_indexes)
            if plan is None:
                return local.recovery_point
            try:
                local.sync(plan)
                # new segment files and a new partition dir must be findable after a crash
                # before the recovery point may cover them; partition.metadata goes too
                self._flush_metadata()
            except OSError as e:
                raise self.log_dir.fail(f"{self.name}: fsync", e) from e
            finally:
                local.close_fds(plan)
            if not plan.synced:
                return local.recovery_point
            return local.end_flush(plan, healthy=not self.log_dir.offline)

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
            if self._local.closed:
                return
            with self._failing_dir("close"):
                self._local.deactivate_active()
                if flush and self.producer_state is not None:
                    self.producer_state.on_close(self.log_end_offset)
            if not sync_parent_dir:
                self._local.dir_sync.parent_synced()
        if flush:
            self.flush(all_indexes=True)
        with self._lock:
            self._local.close_files()

    def abandon(self) -> None:
        """Close file descriptors without writing anything (a simulated crash)."""
        with self._lock:
            self._local.abandon()

    def delete_files_now(self) -> None:
        """Remove every file of this log, including pending ``.deleted`` ones."""
        with self._lock:
            self._local.delete_files_now()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self._log_start_offset}, "
            f"hw={self._high_watermark}, end={self.log_end_offset}, "
            f"segments={self._local.segment_count})"
        )
