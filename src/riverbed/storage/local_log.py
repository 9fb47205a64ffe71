"""LocalLog: the segments of one partition replica on local disk, and only them.

Kafka splits a partition's log in two: ``LocalLog`` (the segments in the partition dir)
and ``UnifiedLog`` (the high watermark, log start offset, producer state, leader epochs
and the remote tier over it). riverbed does the same: this class is the local log,
:class:`~riverbed.storage.log.PartitionLog` the unified one. A LocalLog knows nothing of
producers, epochs, watermarks or the remote tier.

Files, in ``<log dir>/<topic>-<partition>/`` (Kafka's names, byte for byte):

- ``<20-digit base offset>.log`` holds whole record batches back to back, exactly as
  produced (after the leader patched base offset, partition leader epoch and maybe
  LogAppendTime); ``.index`` (relative offset -> position, every
  ``index.interval.bytes``), ``.timeindex`` (timestamp -> relative offset) and
  ``.txnindex`` (aborted transactions) beside it (:mod:`riverbed.storage.segment`).
  Offsets within a segment are relative int32s: a batch it cannot hold starts a new one.
- ``*.deleted`` (unlinked after ``file.delete.delay.ms``) and the leftovers removed at
  load: :mod:`riverbed.storage.log_files`.

Rules: the last segment is the active one (the only one appended to) and the log end
offset is its next offset; segments never overlap and their base offsets increase. A
segment rolls when the next batch would pass ``segment.bytes``, its indexes are full, its
relative offsets cannot reach the batch, or ``segment.ms`` (minus the segment's own
jitter) has passed since its first batch's timestamp (KIP-32; its creation time without
one). The recovery point is the offset below which everything is fsynced: loading
after a crash validates every segment from the one holding it on (length, CRC, offsets),
cuts the first invalid batch and everything after it, and rebuilds the indexes.

Locking: every method takes this log's own lock, a *leaf* lock
(a plain RLock): while holding it the log calls only its
segments, its :class:`~riverbed.storage.log_files.SegmentFiles` and the file I/O below
them, never a hook, a listener, the epoch cache or the log dir. The unified log takes its
own lock first and then calls this one (unified -> local, never the reverse; see
:mod:`riverbed.storage.locks`). An ``OSError`` is raised as it is: the unified log takes
the log dir offline. Fsyncs run outside the lock (:meth:`begin_flush` duplicates the fds
under it). No module but this one touches the lock or the segment list
(``tests/unit/test_lock_discipline.py``).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import BatchHeader
from riverbed.storage import log_reads
from riverbed.storage.clock import Clock
from riverbed.storage.config import LogConfig
from riverbed.storage.file_io import FileIO
from riverbed.storage.locks import OuterLock
from riverbed.storage.log_files import (
    LOADED_INDEXES_MAX,
    Cleanable,
    DirSync,
    FileRange,
    FlushPlan,
    LoadedIndexes,
    Rolled,
    SegmentFiles,
    SegmentSpan,
    TimestampOffset,
)
from riverbed.storage.producer_hook import TxnMarker
from riverbed.storage.segment import LogSegment
from riverbed.storage.segment_rules import (
    SegmentMaker,
    add_fsyncs,
    cleanable_segments,
    recover_segments,
    should_roll,
)
from riverbed.storage.time_index import NO_TIMESTAMP
from riverbed.storage.txn_index import AbortedTxn

__all__ = ["LOADED_INDEXES_MAX", "LocalLog"]

log = logging.getLogger("riverbed.storage.log")

T = TypeVar("T")


class LocalLog:
    """The segments of one partition (see the module docstring)."""

    def __init__(
        self,
        directory: Path,
        name: str,
        config: LogConfig,
        clock: Clock,
        *,
        io: FileIO,
        rng: random.Random,
    ) -> None:
        self.directory = directory
        self.name = name
        self._config = config
        self._clock = clock
        self._io = io
        self._lock = threading.RLock()  # a leaf: see the module docstring
        self.dir_sync = DirSync(directory)  # creates the dir; fsyncs are the unified log's
        # segment.jitter.ms draws from ``rng`` (injected for deterministic tests)
        self._maker = SegmentMaker(directory, config, io, rng, self.dir_sync)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._files = SegmentFiles(directory, io)
        self._indexes = LoadedIndexes()
        self._release = self._indexes.release
        self._recovery_point = 0
        self._truncations = 0  # bumped by every truncation (flush must not cover new data)
        self._roll_flush_pending = False
        self._unflushed_messages = 0
        self._last_flush_ms = clock.now_ms()
        self._closed = False

    def outer_lock(self, what: str) -> OuterLock:
        """The unified log's lock: taken before this log's, never while holding it (the
        lock itself is never handed out)."""
        return OuterLock(self._lock, what)

    def lock_held(self) -> bool:
        """True when the calling thread holds this log's lock (for tests and asserts)."""
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]  # RLock's own

    # ---- loading (from the unified log's constructor, before the log is shared) ---------

    def open_segments(self) -> bool:
        """Remove leftover files and open the segments found; False when there is none."""
        now = self._clock.now_ms()
        with self._lock:
            for base in self._files.clean_and_list():
                seg = self._maker.open(base, now)
                self._segments.append(seg)
                self._bases.append(base)
            return bool(self._segments)

    def load_clean_tail(self) -> bool:
        """After a clean shutdown: the active segment's tail from its indexes; False when
        it does not parse (trust nothing after the recovery point: recover)."""
        with self._lock:
            seg = self._segments[-1]
            seg.active = True
            try:
                seg.load_tail_state()
            except ProtocolError as e:
                log.warning("%s: unreadable tail despite clean shutdown: %s", self.name, e)
                return False
            return True

    def recover_from(self, recovery_point: int) -> tuple[int, list[tuple[int, int]]]:
        """Unclean start: validate segments from the one holding the recovery point on.

        Returns the first recovered offset and the (epoch, start offset) of each leader
        epoch the recovered batches start (epochs increasing), for the epoch cache.
        """
        epochs: list[tuple[int, int]] = []

        def note_epoch(h: BatchHeader) -> None:
            if h.partition_leader_epoch > (epochs[-1][0] if epochs else -1):
                epochs.append((h.partition_leader_epoch, h.base_offset))

        with self._lock:
            i = self._segment_index_for(recovery_point)
            first_recovered = self._segments[i].base_offset
            self._segments = recover_segments(self.name, self._segments, i, note_epoch)
            self._bases = [seg.base_offset for seg in self._segments]
            end = self._segments[-1].next_offset
            log.info("%s: recovered from offset %d to log end %d", self.name, first_recovered, end)
            return first_recovered, epochs

    def loaded(self, recovery_point: int) -> None:
        """Loading is done: everything below ``recovery_point`` (at most the end) is durable."""
        with self._lock:
            self._recovery_point = min(max(recovery_point, 0), self.log_end_offset)

    # ---- state -----------------------------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self._config = self._maker.config = config
            self._segments[-1].index_interval_bytes = config.index_interval_bytes

    @property
    def segments(self) -> list[LogSegment]:
        """A copy of the segment list, oldest first."""
        with self._lock:
            return list(self._segments)

    # Reads of one item of the list take no lock (atomic under the GIL, and the list is
    # never empty: changes build the new segment before they swap it in); a caller that
    # needs several values to agree holds the unified log's lock, which every change holds.

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def start_offset(self) -> int:
        """The first segment's base offset (the unified log's local log start is at or above)."""
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def truncations(self) -> int:
        return self._truncations

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    def _segment_index_for(self, offset: int) -> int:
        return max(bisect.bisect_right(self._bases, offset) - 1, 0)

    # ---- appending and rolling ---------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return self._maker.create(base_offset, self._clock.now_ms())

    def _append_segment(self, seg: LogSegment) -> None:
        assert not self._bases or seg.base_offset > self._bases[-1]
        if self._segments:
            self._segments[-1].active = False
        seg.active = True
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def start_at(self, offset: int) -> None:
        """An empty log (at load): its first segment starts at ``offset``."""
        with self._lock:
            self._append_segment(self._new_segment(offset))
            self._recovery_point = offset

    def append_batch(self, data: memoryview, h: BatchHeader, now_ms: int) -> Rolled:
        """Append one validated batch whose offsets are final (base >= the log end),
        rolling first when a rule says so; returns what happened to the segments."""
        with self._lock:
            seg = self._segments[-1]
            rolled = Rolled.NO
            if seg.size == 0 and not seg.can_hold_offset(h.last_offset):
                seg = self._replace_empty_active(h.base_offset)
                rolled = Rolled.REPLACED
            elif should_roll(seg, h, now_ms, self._config):
                seg = self._roll(h.base_offset)
                rolled = Rolled.ROLLED
            seg.append(data, h)
            self._unflushed_messages += h.records_count
            return rolled

    def _replace_empty_active(self, base_offset: int) -> LogSegment:
        # an empty active segment whose 32-bit relative offsets cannot reach the batch
        # (a follower jumping ahead) is replaced by one based at the batch
        self._segments[-1].delete_files()
        seg = self._new_segment(base_offset)
        seg.active = True
        self._segments[-1], self._bases[-1] = seg, base_offset
        if len(self._segments) == 1:
            # the log held nothing: it now starts at the batch (the unified log moves its
            # log start and high watermark there too)
            self._recovery_point = max(self._recovery_point, base_offset)
        return seg

    def roll(self, base_offset: int | None = None) -> LogSegment:
        """Start a new segment at ``base_offset`` (default: the log end offset)."""
        with self._lock:
            return self._roll(
                self._segments[-1].next_offset if base_offset is None else base_offset
            )

    def _roll(self, base_offset: int) -> LogSegment:
        old = self._segments[-1]
        assert base_offset >= old.next_offset, (base_offset, old)
        old.on_become_inactive()
        seg = self._new_segment(base_offset)
        self._append_segment(seg)
        self._roll_flush_pending = True
        log.debug("%s: rolled new segment at %d", self.name, base_offset)
        return seg

    def deactivate_active(self) -> None:
        """At close: write the active segment's final time index entry."""
        with self._lock:
            self._segments[-1].on_become_inactive()

    # ---- truncation --------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch ending at or after ``offset`` (first base <= offset < end)."""
        with self._lock:
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
            self._recovery_point = min(self._recovery_point, self._segments[-1].next_offset)

    def truncate_fully(self, offset: int) -> None:
        """Delete every segment and restart the (empty) log at ``offset``."""
        with self._lock:
            self._truncations += 1
            for seg in self._segments:
                self._schedule_delete(seg)  # renamed first: the new one may take a name
            seg = self._new_segment(offset)
            seg.active = True
            self._segments, self._bases = [seg], [offset]
            self._recovery_point = offset
            self._unflushed_messages = 0

    # ---- deletion (retention, DeleteRecords) -------------------------------------------

    def spans(self) -> list[SegmentSpan]:
        """Every segment with the offset bounding it from above, oldest first."""
        with self._lock:
            segs = self._segments
            ends = [*self._bases[1:], segs[-1].next_offset]
            return [
                SegmentSpan(seg, end, seg.size, i == len(segs) - 1)
                for i, (seg, end) in enumerate(zip(segs, ends, strict=True))
            ]

    def retention_timestamp(self, seg: LogSegment) -> int:
        """A segment's largest timestamp (KIP-32), its file time when it has none."""
        with self._lock:
            largest = seg.largest_timestamp()
            self._release(seg)
            return largest if largest != NO_TIMESTAMP else seg.modified_ms()

    def delete_oldest(self, doomed: list[LogSegment]) -> int:
        """Delete the leading segments ``doomed`` (never the active one: the caller rolls
        first); returns the first remaining segment's base offset."""
        with self._lock:
            n = len(doomed)
            assert self._segments[:n] == doomed and n < len(self._segments), (doomed, n)
            for seg in doomed:
                self._schedule_delete(seg)
            del self._segments[:n], self._bases[:n]
            first = self._segments[0].base_offset
            self._recovery_point = max(self._recovery_point, first)
            return first

    def _schedule_delete(self, seg: LogSegment) -> None:
        self._indexes.forget(seg)
        self._files.schedule_delete(seg, self._clock.now_ms() + self._config.file_delete_delay_ms)

    @property
    def deletes_pending(self) -> bool:
        """Segments renamed ``*.deleted`` wait for their ``file.delete.delay.ms``."""
        return self._files.pending > 0

    def delete_expired_files(self, now_ms: int) -> int:
        """Remove ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        with self._lock:
            due = self._files.take_expired(now_ms)
        self._files.unlink(due)  # unlinks wait for the disk: not under the lock
        return len(due)

    # ---- reads (the algorithms are in riverbed.storage.log_reads) -------------------------

    def read(
        self, offset: int, bound: int, max_bytes: int, min_one_batch: bool
    ) -> tuple[list[FileRange], int, int]:
        """File ranges of whole batches from the one holding ``offset`` (below ``bound``,
        within ``max_bytes``): (ranges, first offset or -1, next offset)."""
        with self._lock:
            i = self._segment_index_for(offset)
            return log_reads.read_ranges(
                self.name, self._segments[i:], offset, bound, max_bytes, min_one_batch,
                self._segments[-1].next_offset, self._release,
            )  # fmt: skip

    def batch_headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches ending at or after ``offset`` up to the log end (no CRC
        check)."""
        return self._per_segment(offset, log_reads.headers_from)

    def _per_segment(
        self, offset: int, read: Callable[[LogSegment, int, log_reads.Release], list[T]]
    ) -> Iterator[T]:
        """``read`` each segment from the one holding ``offset`` on under the lock, and
        yield what it found outside it (the lock is never held across a yield)."""
        with self._lock:
            segs = self._segments[self._segment_index_for(offset) :]
        for seg in segs:
            with self._lock:
                found = read(seg, offset, self._release)
            yield from found

    def offset_for_timestamp(self, timestamp: int, start: int) -> TimestampOffset | None:
        """The first record at or after ``start`` with timestamp >= ``timestamp``."""
        with self._lock:
            segs = self._segments[self._segment_index_for(start) :]
            return log_reads.offset_for_timestamp(self.name, segs, timestamp, start, self._release)

    def max_timestamp_offset(self, start: int) -> TimestampOffset | None:
        """The record with the largest timestamp at or after ``start``."""
        with self._lock:
            segs = self._segments[self._segment_index_for(start) :]
            return log_reads.max_timestamp_offset(segs, start, self._release)

    def max_log_append_time(self) -> int:
        """The newest LogAppendTime stamped in the segments (-1: none)."""
        with self._lock:
            return log_reads.max_log_append_time(self._segments, self._release)

    # ---- aborted-transaction indexes (the rules are in riverbed.storage.log_txns) ------

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)``."""
        with self._lock:
            i = self._segment_index_for(max(fetch_offset, self._segments[0].base_offset))
            return log_reads.aborted_in(self._segments[i:], fetch_offset, upper_bound)

    def txn_batches_from(self, offset: int) -> Iterator[tuple[BatchHeader, TxnMarker | None]]:
        """(header, marker) of every batch from the one holding ``offset`` to the log end."""
        return self._per_segment(offset, log_reads.txn_batches)

    def stale_txn_index_base(self) -> int | None:
        """The base of the first segment whose txn index recovery emptied (None: none)."""
        with self._lock:
            return next((s.base_offset for s in self._segments if s.txn_index_stale), None)

    def append_txn_index(self, entry: AbortedTxn, *, stale_only: bool = False) -> bool:
        """Add ``entry`` to the txn index of the segment holding its marker (only if that
        index is stale, with ``stale_only``); True when written."""
        with self._lock:
            seg = self._segments[self._segment_index_for(entry.last_offset)]
            if stale_only and not seg.txn_index_stale:
                return False
            seg.txn_index.append(entry)
            return True

    def reset_stale_txn_indexes(self) -> None:
        """Empty the txn index of every segment recovery revalidated (their rebuild
        follows: ``PartitionLog.install_txn_index_entries``)."""
        with self._lock:
            for seg in self._segments:
                if seg.txn_index_stale:
                    seg.txn_index.reset()

    def txn_indexes_current(self) -> None:
        """Every txn index is rebuilt (none is stale any more)."""
        with self._lock:
            for seg in self._segments:
                seg.txn_index_stale = False

    # ---- cleaning (the rules are in riverbed.storage.log_cleaning and cleaner) ------------

    def cleanable(self, high_watermark: int, lag_ms: int, now_ms: int) -> list[Cleanable]:
        """Closed segments entirely below ``high_watermark`` whose records are all older
        than ``lag_ms``, oldest first."""
        with self._lock:
            return cleanable_segments(self._segments, high_watermark, lag_ms, now_ms, self._release)

    def dup_segment_fd(self, seg: LogSegment) -> tuple[int, int] | None:
        """(a duplicated fd of the segment's ``.log``, its size), None when it is gone."""
        with self._lock:
            if seg not in self._segments:
                return None
            fd = seg.dup_log_fd()
            size = seg.size
            self._release(seg)
            return fd, size

    def replace_segments(self, group: list[Cleanable], swap: Path) -> bool:
        """Replace the group's segments by the one ``swap`` holds (renamed to the first's
        ``.log``); False when one of them changed meanwhile (then ``swap`` is removed)."""
        first = group[0].segment
        with self._lock:
            segs = self._segments
            i = segs.index(first) if first in segs else -1
            unchanged = i >= 0 and all(
                i + k < len(segs) and segs[i + k] is c.segment and c.segment.size == c.size
                for k, c in enumerate(group)
            )
            if not unchanged:
                swap.unlink(missing_ok=True)
                return False
            for c in group:
                self._schedule_delete(c.segment)
            os.replace(swap, first.log_path)
            fresh = self._maker.open(first.base_offset, self._clock.now_ms(), jitter=False)
            fresh.rebuild_indexes()
            n = len(group)
            self._segments[i : i + n] = [fresh]
            self._bases[i : i + n] = [first.base_offset]
            self._release(fresh)
            return True

    # ---- durability and lifetime -------------------------------------------------------

    def flush_due(self, now_ms: int) -> bool:
        """True when flush.messages / flush.ms or a rolled segment asks for an fsync."""
        with self._lock:
            if self._closed:
                return False
            if self._roll_flush_pending:
                return True
            if self._recovery_point >= self._segments[-1].next_offset:
                return False
            cfg = self._config
            return (
                self._unflushed_messages >= cfg.flush_messages
                or now_ms - self._last_flush_ms >= cfg.flush_ms
            )

    def begin_flush(self, up_to: int | None, all_indexes: bool) -> FlushPlan | None:
        """Duplicate the fds to fsync for everything below ``up_to`` (default: the log
        end); None when the log is closed. The caller fsyncs them without any lock
        (:meth:`sync`), then calls :meth:`end_flush`."""
        with self._lock:
            if self._closed:
                return None
            leo = self._segments[-1].next_offset
            plan = FlushPlan(
                leo if up_to is None else min(up_to, leo), self._truncations, all_indexes
            )
            add_fsyncs(plan, self._segments, self._recovery_point, self._io)
            if not plan.synced:
                self._roll_flush_pending = False
            return plan

    def sync(self, plan: FlushPlan) -> None:
        """fsync the plan's fds (outside the lock: appends go on meanwhile)."""
        for fd in plan.fds:
            self._io.fsync(fd)

    def close_fds(self, plan: FlushPlan) -> None:
        plan.close_fds(self._io)

    def end_flush(self, plan: FlushPlan, *, healthy: bool) -> int:
        """After the plan's fsyncs: advance the recovery point to its target (unless a
        truncation ran meanwhile or the dir failed); returns the recovery point."""
        with self._lock:
            if self._truncations == plan.truncations and healthy:
                for seg in plan.synced:
                    if plan.all_indexes or not seg.active:
                        seg.index_sync_pending = False
                if plan.target > self._recovery_point:
                    self._recovery_point = plan.target
                if self._recovery_point >= self._segments[-1].next_offset:
                    self._unflushed_messages = 0
                self._roll_flush_pending = any(
                    s.index_sync_pending for s in self._segments if not s.active
                )
            self._last_flush_ms = self._clock.now_ms()
            for seg in plan.synced:
                if not seg.active:
                    seg.close_files()  # bound open files: inactive segments reopen on read
            return self._recovery_point

    def close_files(self) -> None:
        """Mark closed and close every segment's files."""
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
