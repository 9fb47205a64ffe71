"""Reads of a partition's segments: file ranges for fetch, ListOffsets by timestamp.

Functions over a run of segments that :class:`~riverbed.storage.local_log.LocalLog`
calls under its lock (each takes the segments from the one to start at, and ``release``,
the local log's bound on loaded indexes, called after using a segment).

``read_ranges`` returns :class:`~riverbed.storage.log_files.FileRange` s of whole batches
(the batch holding the requested offset first; at least one whole batch when asked; only
batches entirely below the upper bound) found via the offset index and a few header reads
per segment, so the server can ``sendfile`` them. ``offset_for_timestamp`` bisects the
time index, scans batch headers from there and decodes only the batch holding the answer.
``aborted_in`` and ``txn_batches`` read the transactions' side (rules in
:mod:`riverbed.storage.log_txns`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import BatchHeader, iter_records
from riverbed.storage.errors import CorruptRecordError, LogDirError
from riverbed.storage.log_files import FileRange, TimestampOffset
from riverbed.storage.producer_hook import TxnMarker, txn_marker_of
from riverbed.storage.segment import LogSegment, SegmentBatch
from riverbed.storage.time_index import NO_TIMESTAMP
from riverbed.storage.txn_index import AbortedTxn

__all__ = [
    "Release",
    "aborted_in",
    "headers_from",
    "max_log_append_time",
    "max_timestamp_offset",
    "offset_for_timestamp",
    "read_ranges",
    "txn_batches",
]

#: The local log's "done with this segment for now" (closes files, bounds loaded indexes).
Release = Callable[[LogSegment], None]


def read_ranges(
    name: str,
    segs: Sequence[LogSegment],
    offset: int,
    bound: int,
    max_bytes: int,
    min_one_batch: bool,
    leo: int,
    release: Release,
) -> tuple[list[FileRange], int, int]:
    """(ranges, first offset or -1, next offset) of whole batches from ``offset``; the
    ranges are closed if this fails."""
    ranges: list[FileRange] = []
    total, first_offset, next_offset = 0, -1, offset
    i = 0
    full = offset >= bound
    while not full and i < len(segs):
        seg = segs[i]
        seg_end = segs[i + 1].base_offset if i + 1 < len(segs) else leo
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
            # pinned before release closes the segment's own fd
            ranges.append(FileRange.pin(seg, start.position, end - start.position))
        except BaseException as e:
            for r in ranges:
                r.close()  # the caller gets none of them
            if isinstance(e, ProtocolError):
                raise LogDirError(f"{name}: corrupt segment {seg.log_path}: {e}") from e
            raise
        finally:
            release(seg)
        if first_offset < 0:
            first_offset = h.base_offset
        total += end - start.position
        next_offset = nxt
        i += 1
    return ranges, first_offset, next_offset


def headers_from(seg: LogSegment, offset: int, release: Release) -> list[BatchHeader]:
    """Headers of the segment's batches ending at or after ``offset`` (no CRC check)."""
    try:
        start = seg.translate_offset(offset)
        if start is None:
            return []
        return [b.header for b in seg.iter_headers(start.position)]
    finally:
        release(seg)


def offset_for_timestamp(
    name: str, segs: Sequence[LogSegment], timestamp: int, start: int, release: Release
) -> TimestampOffset | None:
    """The first record at or after ``start`` with timestamp >= ``timestamp`` (None when
    every record is older)."""
    for seg in segs:
        try:
            if seg.largest_timestamp() < timestamp:
                continue
            for b in seg.find_offset_by_timestamp(timestamp, start):
                if b.header.max_timestamp < timestamp:
                    continue
                found = _record_at_or_after(seg, b, timestamp, start)
                if found is not None:
                    return found
        except ProtocolError as e:
            raise LogDirError(f"{name}: corrupt segment {seg.log_path}: {e}") from e
        finally:
            release(seg)
    return None


def max_timestamp_offset(
    segs: Sequence[LogSegment], start: int, release: Release
) -> TimestampOffset | None:
    """ListOffsets MAX_TIMESTAMP (-3): the record with the largest timestamp."""
    best: LogSegment | None = None
    for seg in segs:
        if seg.size and (best is None or seg.largest_timestamp() > best.max_timestamp):
            best = seg
        release(seg)
    if best is None or best.max_timestamp == NO_TIMESTAMP:
        return None
    try:
        b = best.translate_offset(best.offset_of_max_timestamp)
        assert b is not None
        return _record_at_or_after(best, b, best.max_timestamp, start)
    finally:
        release(best)


def _record_at_or_after(
    seg: LogSegment, b: SegmentBatch, timestamp: int, min_offset: int
) -> TimestampOffset | None:
    data = seg.pread(b.header.size, b.position)
    for rec in iter_records(data):
        if rec.timestamp >= timestamp and rec.offset >= min_offset:
            return TimestampOffset(rec.timestamp, rec.offset, b.header.partition_leader_epoch)
    return None


def max_log_append_time(segs: Sequence[LogSegment], release: Release) -> int:
    """The newest LogAppendTime stamped in ``segs`` (-1: none), newest segment first."""
    for seg in reversed(segs):
        if seg.size:
            found = seg.max_log_append_time()
            release(seg)
            if found != NO_TIMESTAMP:
                return found
    return NO_TIMESTAMP


def aborted_in(segs: Sequence[LogSegment], fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
    """The aborted transactions of ``segs``' txn indexes overlapping ``[fetch_offset,
    upper_bound)``, until a segment's search is complete (see log_txns)."""
    found: list[AbortedTxn] = []
    for seg in segs:
        search = seg.txn_index.collect(fetch_offset, upper_bound)
        found += search.aborted
        if search.complete:
            break
    return found


def txn_batches(
    seg: LogSegment, offset: int, release: Release
) -> list[tuple[BatchHeader, TxnMarker | None]]:
    """(header, marker) of the segment's batches ending at or after ``offset``; a
    transaction marker is decoded (an undecodable one reads as None)."""
    out: list[tuple[BatchHeader, TxnMarker | None]] = []
    try:
        start = seg.translate_offset(offset)
        if start is None:
            return out
        for b in seg.iter_headers(start.position):
            h = b.header
            marker = None
            if h.is_control and h.is_transactional:
                try:
                    marker = txn_marker_of(seg.pread(h.size, b.position), h)
                except CorruptRecordError:
                    marker = None
            out.append((h, marker))
    finally:
        release(seg)
    return out
