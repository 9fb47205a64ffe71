"""The cleaner's view of a segment: where each record sits, its key's digest, offset,
timestamp and whether it is a tombstone, read without building record objects; and the
rewrite of one batch from the record bytes it keeps.

A v2 record is ``length | attributes | timestampDelta | offsetDelta | key | value |
headers`` (varints, see `riverbed.protocol.records`). The scan reads the length, the two
deltas, the key and the value's length, and skips the rest by the record's length. A
kept record's bytes are copied whole when its batch keeps its firstTimestamp (then its
deltas still hold); otherwise only its two deltas are written anew in front of its
``key | value | headers`` bytes, copied as they are.
"""

from __future__ import annotations

import hashlib
from array import array
from dataclasses import dataclass, field
from typing import Any

from riverbed.protocol.compression import DECOMPRESSED_MAX_BYTES, decompress
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    BATCH_HEADER_SIZE,
    BatchHeader,
    TimestampType,
    iter_batches,
)
from riverbed.protocol.records import _read_varint, _write_varint, frame_batch

#: The digest standing for a missing key (such records are never kept nor mapped).
NO_KEY_DIGEST = bytes(16)


@dataclass(slots=True)
class ScannedBatch:
    pos: int
    header: BatchHeader
    #: The uncompressed records section ("" for control batches: not scanned).
    section: bytes
    #: Index of its first record in the segment's record lists, and how many it has.
    first: int
    count: int


@dataclass(slots=True)
class ScannedSegment:
    """Per record, in log order: digest (16 bytes each, concatenated), offset,
    timestamp, flags (bit 0: tombstone, bit 1: no key) and its bytes in its batch's
    section: [start, end) with the key starting at ``rest``."""

    batches: list[ScannedBatch] = field(default_factory=list)
    digests: bytearray = field(default_factory=bytearray)
    offsets: array[int] = field(default_factory=lambda: array("q"))
    timestamps: array[int] = field(default_factory=lambda: array("q"))
    flags: bytearray = field(default_factory=bytearray)
    starts: array[int] = field(default_factory=lambda: array("q"))
    rests: array[int] = field(default_factory=lambda: array("q"))
    ends: array[int] = field(default_factory=lambda: array("q"))


TOMBSTONE = 1
KEYLESS = 2


def scan_segment(data: bytes, start_offset: int = 0) -> ScannedSegment:
    """Every data batch of ``data`` ending after ``start_offset``, and their records."""
    out = ScannedSegment()
    view = memoryview(data)
    md5 = hashlib.md5
    for pos, h in iter_batches(data):
        if h.next_offset <= start_offset:
            continue
        if h.is_control or h.records_count == 0:
            out.batches.append(ScannedBatch(pos, h, b"", len(out.offsets), 0))
            continue
        raw = view[pos + BATCH_HEADER_SIZE : pos + h.size]
        codec = h.attributes & ATTR_COMPRESSION_MASK
        section = bytes(raw) if codec == 0 else decompress(codec, raw, DECOMPRESSED_MAX_BYTES)
        first = len(out.offsets)
        _scan_records(section, h, out, md5)
        out.batches.append(ScannedBatch(pos, h, section, first, h.records_count))
    return out


def _varint(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    # one- and two-byte varints inline (short keys and deltas, values under 8 KiB)
    b = data[pos] if pos < end else 0x80
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    if pos + 1 < end and data[pos + 1] < 0x80:
        z = (b & 0x7F) | (data[pos + 1] << 7)
        return (z >> 1) ^ -(z & 1), pos + 2
    return _read_varint(data, pos, end, 10, what)


def _scan_records(section: bytes, h: BatchHeader, out: ScannedSegment, md5: Any) -> None:
    # The cleaner's hot loop: one- and two-byte varints (lengths under 8 KiB, deltas
    # under 64) are decoded inline, anything longer through _varint.
    n = len(section)
    pos = 0
    base = h.base_offset
    log_append = bool(h.attributes & ATTR_TIMESTAMP_TYPE)
    first_ts = h.first_timestamp
    digests, flags = out.digests, out.flags
    offsets, timestamps = out.offsets, out.timestamps
    starts, rests, ends = out.starts, out.rests, out.ends
    varint = _varint
    for _ in range(h.records_count):
        start = pos
        b = section[pos] if pos < n else 0x80
        if b < 0x80:
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif pos + 1 < n and section[pos + 1] < 0x80:
            z = (b & 0x7F) | (section[pos + 1] << 7)
            length, pos = (z >> 1) ^ -(z & 1), pos + 2
        else:
            length, pos = varint(section, pos, n, "length")
        end = pos + length
        if length < 6 or end > n:
            raise ProtocolError(f"bad record length {length}", field="records")
        b = section[pos + 1]  # after the attributes (a record holds >= 6 bytes)
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            ts_delta, pos = varint(section, pos + 1, end, "timestampDelta")
        b = section[pos] if pos < end else 0x80
        if b < 0x80:
            off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            off_delta, pos = varint(section, pos, end, "offsetDelta")
        rest = pos
        b = section[pos] if pos < end else 0x80
        if b < 0x80:
            key_len, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            key_len, pos = varint(section, pos, end, "key")
        if key_len >= 0:
            if pos + key_len > end:
                raise ProtocolError(f"bad record key length {key_len}", field="records")
            digests += md5(section[pos : pos + key_len], usedforsecurity=False).digest()
            pos += key_len
            flag = 0
        else:
            digests += NO_KEY_DIGEST
            flag = KEYLESS
        if pos >= end:
            raise ProtocolError("record without a value length", field="records")
        if section[pos] == 1:  # zigzag -1: a null value
            flag |= TOMBSTONE
        offsets.append(base + off_delta)
        timestamps.append(h.max_timestamp if log_append else first_ts + ts_delta)
        flags.append(flag)
        starts.append(start)
        rests.append(rest)
        ends.append(end)
        pos = end
    if pos != n:
        raise ProtocolError(f"{n - pos} bytes after the records of the batch", field="records")


def rewrite_batch(
    seg: ScannedSegment,
    b: ScannedBatch,
    kept: list[int],
    delete_horizon_ms: int | None,
) -> bytes:
    """Batch ``b`` holding only its records of indexes ``kept`` (into ``seg``), at
    their offsets; header fields as `riverbed.protocol.records.build_batch` writes them
    for the cleaner (firstTimestamp: the horizon when given, else the first kept
    record's; an emptied batch is header only, uncompressed)."""
    h = b.header
    timestamps = seg.timestamps
    if kept:
        first_ts = timestamps[kept[0]]
        max_ts = max(timestamps[i] for i in kept)
    else:
        first_ts = max_ts = h.max_timestamp
    log_append = h.timestamp_type == TimestampType.LOG_APPEND_TIME
    if log_append and h.max_timestamp != -1:
        max_ts = h.max_timestamp
    if delete_horizon_ms is not None:
        first_ts = delete_horizon_ms
    section, starts, rests, ends = b.section, seg.starts, seg.rests, seg.ends
    body = bytearray()
    if first_ts == h.first_timestamp and not log_append:
        for i in kept:  # deltas unchanged: whole records copied
            body += section[starts[i] : ends[i]]
    else:
        rec = bytearray()
        base = h.base_offset
        for i in kept:
            rec.clear()
            rec.append(0)  # attributes
            _write_varint(rec, timestamps[i] - first_ts)
            _write_varint(rec, seg.offsets[i] - base)
            rec += section[rests[i] : ends[i]]
            _write_varint(body, len(rec))
            body += rec
    return frame_batch(
        body,
        len(kept),
        base_offset=h.base_offset,
        compression=h.compression if kept else 0,
        timestamp_type=h.timestamp_type,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        last_offset_delta=h.last_offset_delta,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        delete_horizon=delete_horizon_ms is not None,
    )
