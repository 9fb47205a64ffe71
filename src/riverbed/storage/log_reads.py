"""Reads of a partition log: file ranges for fetch, ListOffsets by timestamp.

``read`` returns :class:`~riverbed.storage.log_files.FileRange` s of whole batches (the
batch holding the requested offset first; at least one whole batch when asked; only
batches entirely below the upper bound) found via the offset index and a few header reads
per segment, so the server can ``sendfile`` them. ``offset_for_timestamp`` bisects the
time index, scans batch headers from there and decodes only the batch holding the answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import BatchHeader, iter_records
from riverbed.storage.errors import LogDirError, OffsetOutOfRangeError
from riverbed.storage.log_base import LogBase
from riverbed.storage.log_files import FileRange, ReadResult, TimestampOffset
from riverbed.storage.segment import LogSegment, SegmentBatch
from riverbed.storage.time_index import NO_TIMESTAMP

__all__ = ["LogReads"]


class LogReads(LogBase):
    """Fetch reads and timestamp lookups (mixed into PartitionLog)."""

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
            ranges: list[FileRange] = []
            try:
                return self._read_locked(offset, bound, max_bytes, min_one_batch, ranges, lso, leo)
            except BaseException:
                for r in ranges:
                    r.close()
                raise

    def _read_locked(
        self,
        offset: int,
        bound: int,
        max_bytes: int,
        min_one_batch: bool,
        ranges: list[FileRange],
        lso: int,
        leo: int,
    ) -> ReadResult:
        # the lock is held; ``ranges`` is the caller's so it closes them if this fails
        total = 0
        first_offset = -1
        next_offset = offset
        i = self._segment_index_for(offset)
        full = offset >= bound
        while not full and i < len(self._segments):
            seg = self._segments[i]
            seg_end = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else leo
            try:
                start = seg.translate_offset(next_offset)
                if start is None:
                    i += 1
                    continue
                h = start.header
                if h.next_offset > bound:
                    break
                budget = max_bytes - total
                if h.size > budget:
                    if not (min_one_batch and total == 0):
                        break
                    end, nxt, full = start.position + h.size, h.next_offset, True
                else:
                    # the end of the last whole batch within the byte budget and below
                    # the bound, found via the offset index and a short header scan
                    limit = start.position + budget
                    if bound < seg_end:
                        cut = seg.translate_offset(bound, start.position)
                        if cut is not None:
                            limit = min(limit, cut.position)
                    end = seg.whole_batches_end(start.position, limit)
                    if end < seg.size:
                        after = seg.read_header(end)
                        assert after is not None
                        nxt, full = after.base_offset, True
                    else:
                        nxt = seg_end
                # pinned before _release closes the segment's own fd
                ranges.append(FileRange.pin(seg, start.position, end - start.position))
            except ProtocolError as e:
                raise LogDirError(f"{self.name}: corrupt segment {seg.log_path}: {e}") from e
            finally:
                self._release(seg)
            if first_offset < 0:
                first_offset = h.base_offset
            total += end - start.position
            next_offset = nxt
            i += 1
        return ReadResult(
            ranges=ranges,
            first_offset=first_offset,
            next_offset=next_offset,
            high_watermark=self._high_watermark,
            log_start_offset=self._log_start_offset,
            log_end_offset=leo,
        )

    def batch_headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches ending at or after ``offset`` up to the log end (for
        rebuilding state from the log, e.g. producer state; no CRC check)."""
        with self._lock:
            i = self._segment_index_for(offset)
            for seg in self._segments[i:]:
                try:
                    start = seg.translate_offset(offset)
                    if start is None:
                        continue
                    for b in seg.iter_headers(start.position):
                        yield b.header
                finally:
                    self._release(seg)

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """The first record at or after the log start with timestamp >= ``timestamp``.

        ListOffsets by time: None when every record is older.
        """
        with self._lock:
            self.log_dir.check(self.name)
            lso = self._log_start_offset
            for seg in self._segments[self._segment_index_for(lso) :]:
                try:
                    if seg.largest_timestamp() < timestamp:
                        continue
                    for b in seg.find_offset_by_timestamp(timestamp, lso):
                        if b.header.max_timestamp < timestamp:
                            continue
                        found = self._record_at_or_after(seg, b, timestamp, lso)
                        if found is not None:
                            return found
                except ProtocolError as e:
                    raise LogDirError(f"{self.name}: corrupt segment {seg.log_path}: {e}") from e
                finally:
                    self._release(seg)
            return None

    def max_timestamp_offset(self) -> TimestampOffset | None:
        """ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp."""
        with self._lock:
            self.log_dir.check(self.name)
            best: LogSegment | None = None
            for seg in self._segments[self._segment_index_for(self._log_start_offset) :]:
                if seg.size and (best is None or seg.largest_timestamp() > best.max_timestamp):
                    best = seg
                self._release(seg)
            if best is None or best.max_timestamp == NO_TIMESTAMP:
                return None
            try:
                b = best.translate_offset(best.offset_of_max_timestamp)
                assert b is not None
                found = self._record_at_or_after(
                    best, b, best.max_timestamp, self._log_start_offset
                )
            finally:
                self._release(best)
            return found

    def _record_at_or_after(
        self, seg: LogSegment, b: SegmentBatch, timestamp: int, min_offset: int
    ) -> TimestampOffset | None:
        data = seg.pread(b.header.size, b.position)
        for rec in iter_records(data):
            if rec.timestamp >= timestamp and rec.offset >= min_offset:
                return TimestampOffset(rec.timestamp, rec.offset, b.header.partition_leader_epoch)
        return None
