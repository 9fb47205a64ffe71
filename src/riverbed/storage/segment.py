"""One log segment: a ``.log`` file of whole v2 record batches plus its two indexes.

Files of a segment with base offset B, in the partition dir ``<topic>-<partition>/``::

    {B:020d}.log        record batches exactly as on the wire, offsets assigned
                        (format and recovery's valid prefix: :mod:`riverbed.storage.segment_scan`)
    {B:020d}.index      offset index (:mod:`riverbed.storage.offset_index`)
    {B:020d}.timeindex  time index (:mod:`riverbed.storage.time_index`)

A segment being deleted gets the suffix ``.deleted`` on each file (removed after
``file.delete.delay.ms``); a leftover ``.deleted``/``.tmp``/``.cleaned``/``.swap`` file
found at start-up is garbage from an interrupted operation.

Index maintenance happens per appended batch, identically when appending and when
rebuilding from the ``.log`` (so a rebuilt index equals the written one): before a batch
is counted, if more than ``index.interval.bytes`` were appended since the last entry, the
offset index gets (batch last offset, batch position) and the time index gets the max
timestamp so far (if it grew); the first batch of a segment always gets a time index
entry, and :meth:`LogSegment.on_become_inactive` adds the final max timestamp.
The segment tracks its max timestamp and the offset of it from the batch headers only.

A new segment opens only its ``.log``; the index files are created lazily (see
:mod:`riverbed.storage.index_file`): on the first written entry, or when the segment
becomes inactive (roll, close of a non-empty segment), so an inactive segment on disk
always has both. An empty segment needs no index files at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    parse_header,
)
from riverbed.storage.file_io import OS_FILE_IO, FileIO
from riverbed.storage.index_file import INT32_MAX, CorruptIndexError
from riverbed.storage.offset_index import OffsetIndex
from riverbed.storage.recent_batches import RecentBatches
from riverbed.storage.segment_scan import valid_batches
from riverbed.storage.time_index import NO_TIMESTAMP, TimeIndex
from riverbed.storage.txn_index import TXN_INDEX_SUFFIX, CorruptTxnIndexError, TransactionIndex

__all__ = [
    "DELETED_SUFFIX",
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "LogSegment",
    "SegmentBatch",
    "segment_file_name",
]

log = logging.getLogger(__name__)

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
DELETED_SUFFIX: Final = ".deleted"


def segment_file_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.log`` for base offset 42 (Kafka's 20-digit names)."""
    assert base_offset >= 0, base_offset
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class SegmentBatch:
    """A batch located in a segment: its byte position and header."""

    position: int
    header: BatchHeader


class LogSegment:
    """The files of one segment and what is known about its contents."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        io: FileIO = OS_FILE_IO,
    ) -> None:
        self.directory = directory
        self.io = io
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX)
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX),
            base_offset,
            max_index_bytes,
            io,
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX),
            base_offset,
            max_index_bytes,
            io,
        )
        #: aborted transactions whose ABORT marker is in this segment (created on the first)
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX), base_offset, io
        )
        #: recovery revalidated this segment: its txn index waits for a rebuild from the
        #: producer state (``PartitionLog.rebuild_txn_indexes``)
        self.txn_index_stale = False
        self.created_ms = created_ms
        # segment.jitter.ms drawn for this segment (Kafka's LogConfig.randomSegmentJitter)
        self.roll_jitter_ms = 0
        self._fd: int | None = None
        #: Bumped before every truncation: a pinned FileRange read before it is stale.
        self.truncations = 0
        self.size = 0
        self.next_offset = base_offset  # offset after the last batch (base when empty)
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.rolling_based_timestamp = NO_TIMESTAMP  # max timestamp of the first batch
        self.bytes_since_last_index_entry = 0
        self.active = False  # the log's last segment (the one appended to)
        self.index_sync_pending = False  # index files written since their last fsync
        self._indexes_checked = False
        self._tail_known = False  # next_offset / max_timestamp are exact
        self._verified_sizes: tuple[int, int] | None = None  # index sizes when unloaded
        #: the batches appended last, up to the end: reads at the log end skip the index
        self.recent = RecentBatches()

    # ---- creation and loading ------------------------------------------------------------

    @classmethod
    def create(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        io: FileIO = OS_FILE_IO,
    ) -> LogSegment:
        """A new, empty segment: the ``.log`` is created (truncating a stale one); the
        indexes are lazy (no files until needed, stale ones truncated then)."""
        seg = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_bytes=max_index_bytes,
            created_ms=created_ms,
            io=io,
        )
        seg._fd = io.open(seg.log_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        seg.offset_index.start_empty()
        seg.time_index.start_empty()
        seg._indexes_checked = True
        seg._tail_known = True
        return seg

    @classmethod
    def open_existing(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        io: FileIO = OS_FILE_IO,
    ) -> LogSegment:
        """An existing segment; contents are trusted until :meth:`recover` or a load."""
        seg = cls(
            directory,
            base_offset,
            index_interval_bytes=index_interval_bytes,
            max_index_bytes=max_index_bytes,
            created_ms=created_ms,
            io=io,
        )
        seg.size = seg.log_path.stat().st_size
        return seg

    # ---- file access ---------------------------------------------------------------------

    def _log_fd(self) -> int:
        if self._fd is None:
            self._fd = self.io.open(self.log_path, os.O_RDWR)
        return self._fd

    def dup_log_fd(self) -> int:
        """An fd of the ``.log`` of its own (a fetch pins the file it sends from)."""
        return os.dup(self._log_fd())

    def pread(self, size: int, position: int) -> bytes:
        """Up to ``size`` bytes of the ``.log`` at ``position``."""
        return os.pread(self._log_fd(), size, position)

    def read_header(self, position: int) -> BatchHeader | None:
        """The batch header at ``position``, None at the end; ProtocolError if torn."""
        if position >= self.size:
            return None
        known = self.recent.header_at(position)
        if known is not None:
            return known
        data = self.pread(BATCH_HEADER_SIZE, position)
        h = parse_header(data)
        if position + h.size > self.size:
            raise ProtocolError(f"{self.log_path}: batch at {position} runs past the end")
        return h

    def iter_headers(self, position: int = 0, end: int | None = None) -> Iterator[SegmentBatch]:
        """Batch headers from ``position`` (a batch start) up to ``end`` (no CRC check)."""
        stop = self.size if end is None else min(end, self.size)
        while position < stop:
            h = self.read_header(position)
            assert h is not None
            yield SegmentBatch(position, h)
            position += h.size

    # ---- indexes -------------------------------------------------------------------------

    def ensure_indexes(self) -> None:
        """Load and sanity-check both indexes, rebuilding them from the log if bad."""
        if self._indexes_checked:
            return
        if self.size == 0:
            # nothing to index: missing files are fine, stale ones get truncated on write
            self.offset_index.start_empty()
            self.time_index.start_empty()
            self._indexes_checked = True
            return
        try:
            self.offset_index.load()
            self.time_index.load()
            if self._verified_sizes == (self.offset_index.size_bytes, self.time_index.size_bytes):
                # reloaded after an unload: these files passed the full check already
                self._indexes_checked = True
                return
            self.offset_index.sanity_check(self.size)
            self.time_index.sanity_check(self._offset_bound())
            if self.size and not len(self.time_index):
                # the first batch of a segment is always time-indexed
                raise CorruptIndexError(f"{self.time_index.path}: empty for a non-empty segment")
        except CorruptIndexError as e:
            log.warning("rebuilding indexes of %s: %s", self.log_path, e)
            self.rebuild_indexes()
        self._indexes_checked = True

    def _offset_bound(self) -> int:
        # exact once the tail is known; an inactive segment checked lazily only knows
        # that its offsets are representable
        return self.next_offset if self._tail_known else self.base_offset + INT32_MAX + 1

    def rebuild_indexes(self) -> None:
        """Rebuild both indexes by scanning the ``.log`` (trusted; no CRC check)."""
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_state()
        for b in self.iter_headers():
            self._account(b.position, b.header)
        self._indexes_checked = True
        self._tail_known = True
        self.index_sync_pending = True
        if not self.active:
            self.on_become_inactive()

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_based_timestamp = NO_TIMESTAMP
        self.bytes_since_last_index_entry = 0

    def _account(self, position: int, h: BatchHeader) -> None:
        """Index bookkeeping for the batch ``h`` just written/found at ``position``."""
        first = position == 0
        if h.max_timestamp > self.max_timestamp:
            self.max_timestamp = h.max_timestamp
            self.offset_of_max_timestamp = h.last_offset
        if first:
            self.rolling_based_timestamp = h.max_timestamp
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        elif self.bytes_since_last_index_entry > self.index_interval_bytes:
            # a full index (only possible when rebuilding with a smaller
            # segment.index.bytes) just stays sparser: lookups scan forward from it
            if not self.offset_index.is_full:
                self.offset_index.append(h.last_offset, position)
            if not self.time_index.is_full:
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += h.size
        self.next_offset = h.next_offset

    def indexes_full(self) -> bool:
        self.ensure_indexes()
        return self.offset_index.is_full or self.time_index.is_full

    def can_hold_offset(self, offset: int) -> bool:
        """True when ``offset`` fits the 32-bit relative offsets of this segment."""
        return 0 <= offset - self.base_offset <= INT32_MAX

    # ---- appending -----------------------------------------------------------------------

    def append(self, data: memoryview, h: BatchHeader) -> None:
        """Write one whole batch ``data`` (header ``h``) at the end and index it."""
        assert h.base_offset >= self.next_offset, (h, self.next_offset)
        if not self._indexes_checked:
            self.ensure_indexes()
        fd = self._fd if self._fd is not None else self._log_fd()
        start = self.size
        try:
            written = self.io.pwrite(fd, data, start)
            while written < len(data):
                n = self.io.pwrite(fd, data[written:], start + written)
                if n <= 0:
                    raise OSError(f"short write to {self.log_path}")
                written += n
        except OSError:
            # leave no partial batch behind (a later append would write over it anyway)
            with contextlib.suppress(OSError):
                self.io.ftruncate(fd, start)
            raise
        self._account(start, h)
        self.size = start + len(data)
        self.recent.add(start, h)

    # ---- lookups -------------------------------------------------------------------------

    def translate_offset(self, offset: int, start_position: int = 0) -> SegmentBatch | None:
        """The first batch with last offset >= ``offset`` (None when there is none)."""
        recent = self.recent
        if recent.covers_offset(offset):  # a read at the log end: no index, no pread
            i = recent.first_ending_at_or_after(offset, start_position)
            if i == len(recent.positions):
                return None
            return SegmentBatch(recent.positions[i], recent.headers[i])
        self.ensure_indexes()
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        for b in self.iter_headers(position):
            if b.header.last_offset >= offset:
                return b
        return None

    def whole_batches_end(self, start: int, limit: int) -> int:
        """End of the last whole batch that starts at or after ``start`` within ``limit``.

        ``start`` is a batch position; the offset index finds a batch start near
        ``limit`` so only a few headers are read whatever the distance.
        """
        if self.recent.covers_position(start):
            return self.recent.whole_batches_end(start, limit)
        self.ensure_indexes()
        _, pos = self.offset_index.floor_position(limit)
        pos = max(pos, start)
        for b in self.iter_headers(pos):
            end = b.position + b.header.size
            if end > limit:
                break
            pos = end
        return pos

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> Iterator[SegmentBatch]:
        """Batches from the time index's floor entry for ``timestamp`` (scan candidates)."""
        self.ensure_indexes()
        _, ts_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(ts_offset, starting_offset))
        for b in self.iter_headers(position):
            if b.header.last_offset >= starting_offset:
                yield b

    def largest_timestamp(self) -> int:
        """Max timestamp in the segment (the time index's last entry for inactive ones).

        Kept once known, so retention scans do not reload every segment's index.
        """
        if self.max_timestamp == NO_TIMESTAMP and self.size:
            self.ensure_indexes()
            if self.max_timestamp == NO_TIMESTAMP and len(self.time_index):
                self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        return self.max_timestamp

    def max_log_append_time(self) -> int:
        """The largest timestamp of this segment's LogAppendTime batches (-1: none)."""
        largest = self.largest_timestamp()
        if largest != NO_TIMESTAMP:
            # usually the batch holding the segment's max timestamp is a LogAppendTime one
            b = self.translate_offset(self.offset_of_max_timestamp)
            h = b.header if b is not None else None
            if h is not None and h.timestamp_type == 1 and h.max_timestamp == largest:
                return largest
        found = NO_TIMESTAMP
        for b in self.iter_headers():
            if b.header.timestamp_type == 1 and b.header.max_timestamp > found:
                found = b.header.max_timestamp
        return found

    def unload_indexes(self) -> None:
        """Drop both index mirrors (re-read on next use; re-checked only if resized)."""
        if self._indexes_checked:
            self._verified_sizes = (self.offset_index.size_bytes, self.time_index.size_bytes)
        self.offset_index.unload()
        self.time_index.unload()
        self._indexes_checked = False

    def modified_ms(self) -> int:
        """The ``.log`` mtime: retention's fallback for segments without timestamps."""
        return self.log_path.stat().st_mtime_ns // 1_000_000

    def load_tail_state(self) -> None:
        """Recompute next offset and max timestamp from the indexes + a short scan.

        Used for the active segment after a clean start and after truncation: the last
        offset index entry bounds the scan to about ``index.interval.bytes``.
        """
        self.ensure_indexes()
        self._reset_state()
        ts, ts_off = self.time_index.last_entry()
        if ts != NO_TIMESTAMP:
            self.max_timestamp, self.offset_of_max_timestamp = ts, ts_off
        _, position = self.offset_index.last_entry()
        first = self.read_header(0)
        if first is not None:
            self.rolling_based_timestamp = first.max_timestamp
        for b in self.iter_headers(position):
            h = b.header
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
            self.next_offset = h.next_offset
            self.bytes_since_last_index_entry += h.size
        self._tail_known = True

    # ---- recovery and truncation ---------------------------------------------------------

    def recover(self, on_batch: Callable[[BatchHeader], None] | None = None) -> int:
        """Keep the ``.log``'s valid prefix (`riverbed.storage.segment_scan`: lengths,
        CRC, offsets) and truncate the first bad batch on.

        Indexes are rebuilt. Returns the number of bytes truncated.
        """
        self._reset_state()
        self.recent.clear()
        file_size = self.log_path.stat().st_size
        self.size = file_size
        for idx in (self.offset_index, self.time_index):
            if file_size:
                idx.reset()
            else:
                idx.start_empty()  # nothing to index: no files needed
        # the txn index is rebuilt once the producer state is attached (its entries stay
        # until then: a restart before the rebuild must not lose them)
        self.txn_index_stale = True
        pos = 0  # the end of the valid prefix (`riverbed.storage.segment_scan`)
        for position, h in valid_batches(self.pread, file_size, self.base_offset, self.log_path):
            self._account(position, h)
            if on_batch is not None:
                on_batch(h)
            pos = position + h.size
        truncated = file_size - pos
        if truncated:
            self.io.ftruncate(self._log_fd(), pos)
            self.size = pos
        try:
            self.txn_index.truncate_to(self.next_offset)  # no abort whose marker was cut off
        except CorruptTxnIndexError as e:
            log.warning("%s: %s: emptied (the rebuild fills it)", self.log_path, e)
            self.txn_index.reset()
        self._indexes_checked = True
        self._tail_known = True
        return truncated

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset >= ``offset``; returns bytes removed."""
        b = self.translate_offset(offset)
        if b is None:
            return 0
        position = b.position
        self.recent.clear()
        removed = self.size - position
        self.offset_index.truncate_to(offset)
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.truncations += 1  # before the cut: a range read after it sees the bump
        self.io.ftruncate(self._log_fd(), position)
        self.size = position
        self.load_tail_state()
        return removed

    def on_become_inactive(self) -> None:
        """Roll: make the time index's last entry the segment's max timestamp."""
        self.recent.clear()  # no more appends: reads go through the index (bounded memory)
        self.ensure_indexes()
        if not self.size:
            return  # an empty segment needs no index files (a later roll makes them)
        self.time_index.maybe_append(
            self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True
        )
        # inactive segments always have both files (a missing one means "rebuild")
        self.offset_index.materialize()
        self.time_index.materialize()
        self.index_sync_pending = True

    # ---- durability and lifetime ---------------------------------------------------------

    def dup_fds(self, *, with_indexes: bool = True) -> list[int]:
        """Duplicated fds of the ``.log`` and (optionally) both indexes, for an fsync.

        Used outside the log's lock; pending index entries are written first, and files
        closed since their last write are reopened (a close does not make data durable).
        The active segment's indexes need no fsync: after a crash the segment holding the
        recovery point, hence always the active one, is re-indexed from its ``.log``.
        """
        fds = [self.io.dup(self._log_fd())]
        if self.txn_index.sync_pending:
            # aborted transactions are not rebuilt from an inactive segment: always synced
            txn_fd = self.txn_index.dup_fd()
            if txn_fd is not None:
                fds.append(txn_fd)
            self.txn_index.sync_pending = False
        if not with_indexes:
            return fds
        for idx in (self.offset_index, self.time_index):
            if idx.loaded:
                fd = idx.dup_fd()
                if fd is not None:
                    fds.append(fd)
        return fds

    def flush(self) -> None:
        if self._fd is not None:
            self.io.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self.index_sync_pending = False

    def close_files(self) -> None:
        """Close file descriptors (reopened on demand); contents stay."""
        if self._fd is not None:
            self.io.close(self._fd)
            self._fd = None
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def discard_files(self) -> None:
        """Close fds without writing pending index entries (a simulated crash)."""
        if self._fd is not None:
            self.io.close(self._fd)
            self._fd = None
        self.offset_index.discard()
        self.time_index.discard()
        self.txn_index.discard()

    def rename_to_deleted(self) -> list[Path]:
        """Rename all files to ``*.deleted`` (the first step of a delayed delete)."""
        self.discard_files()
        renamed: list[Path] = []
        for p in self._paths():
            if p.exists():
                target = p.with_name(p.name + DELETED_SUFFIX)
                self.io.replace(p, target)
                renamed.append(target)
        return renamed

    def delete_files(self) -> None:
        self.discard_files()
        for p in self._paths():
            self.io.unlink(p)

    def _paths(self) -> tuple[Path, ...]:
        return (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index.path)

    def __repr__(self) -> str:
        return (
            f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset}, "
            f"max_ts={self.max_timestamp})"
        )
