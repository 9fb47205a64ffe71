"""CreateTime bounds (``message.timestamp.before.max.ms`` / ``after.max.ms``) per batch.

Kafka rejects a produce with INVALID_TIMESTAMP when any record's CreateTime ``ts``
(other than -1, "no timestamp") has ``now - ts > before.max.ms`` or
``ts - now > after.max.ms``; a bound of Long.MAX_VALUE never rejects (Kafka's ``now - ts``
cannot exceed it in 64-bit arithmetic). riverbed decides from the 61-byte batch header
when that is sound and decodes record timestamps only when it is not.

What the v2 header says about its records' timestamps (record ``ts = firstTimestamp +
timestampDelta``):

- ``firstTimestamp`` is the first record's timestamp (the format's definition; the Java
  client's ``MemoryRecordsBuilder`` and librdkafka set it so, with delta 0 for the first
  record);
- ``maxTimestamp`` is the largest record timestamp (clients compute it);
- nothing bounds the smallest: deltas are signed varlongs, and clients write records in
  the order the application sent them, whatever their timestamps, so a later record can
  be older than the first one.

The rule, per batch:

1. ``firstTimestamp`` and ``maxTimestamp`` are record timestamps: either out of bounds
   rejects the batch (header only).
2. The "after" bound is decided by the header: every record is <= ``maxTimestamp``.
3. The "before" bound is decided by the header only when it cannot reject (Long.MAX_VALUE,
   the default) or the batch holds one record (whose timestamp is ``firstTimestamp``).
   Otherwise the record timestamps are decoded — only the length, attributes and
   timestampDelta varints of each record, after decompressing a compressed batch (bounded
   by ``DECOMPRESSED_MAX_BYTES``) — and every one is checked against both bounds, so a
   batch whose middle record is out of bounds is rejected. This per-record cost is paid
   only by topics that set a finite ``message.timestamp.before.max.ms``.

LogAppendTime topics skip all of this (the broker stamps the time).
"""

from __future__ import annotations

from typing import Final

from riverbed.protocol.compression import DECOMPRESSED_MAX_BYTES, decompress
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.record_batch import (
    ATTR_COMPRESSION_MASK,
    BATCH_HEADER_SIZE,
    RECORD_MIN_BYTES,
    BatchHeader,
)
from riverbed.storage.config import LONG_MAX
from riverbed.storage.time_index import NO_TIMESTAMP

__all__ = ["create_time_violation"]

# A varint of a 32-bit field takes at most 5 bytes, of a 64-bit one at most 10.
_VARINT32_BYTES_MAX: Final = 5
_VARLONG_BYTES_MAX: Final = 10


def _out_of_bounds(ts: int, now_ms: int, before_max_ms: int, after_max_ms: int) -> bool:
    if ts == NO_TIMESTAMP:
        return False
    if before_max_ms < LONG_MAX and now_ms - ts > before_max_ms:
        return True
    return after_max_ms < LONG_MAX and ts - now_ms > after_max_ms


def create_time_violation(
    buf: bytes | bytearray | memoryview,
    position: int,
    h: BatchHeader,
    now_ms: int,
    before_max_ms: int,
    after_max_ms: int,
) -> int | None:
    """The first out-of-bounds CreateTime of the batch ``h`` at ``position``, or None.

    ``buf[position:]`` holds the whole (already CRC-validated) batch. Raises
    :class:`ProtocolError` when the records section must be decoded and is malformed.
    """
    for ts in (h.first_timestamp, h.max_timestamp):
        if _out_of_bounds(ts, now_ms, before_max_ms, after_max_ms):
            return ts
    if before_max_ms >= LONG_MAX or h.records_count <= 1:
        return None
    for ts in _record_timestamps(buf, position, h):
        if _out_of_bounds(ts, now_ms, before_max_ms, after_max_ms):
            return ts
    return None


def _varint(data: bytes | memoryview, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    result = 0
    shift = 0
    limit = min(end, pos + max_bytes)
    while pos < limit:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    raise ProtocolError("truncated or overlong varint in a record", field="records")


def _record_timestamps(
    buf: bytes | bytearray | memoryview, position: int, h: BatchHeader
) -> list[int]:
    """Every record's timestamp (only the varints up to timestampDelta are read)."""
    start = position + BATCH_HEADER_SIZE
    end = position + h.size
    section = memoryview(buf)[start:end]
    codec = h.attributes & ATTR_COMPRESSION_MASK
    data: bytes | memoryview = (
        section if codec == 0 else decompress(codec, section, DECOMPRESSED_MAX_BYTES)
    )
    n = len(data)
    if h.records_count * RECORD_MIN_BYTES > n:
        raise ProtocolError(f"{h.records_count} records cannot fit in {n} bytes", field="records")
    out: list[int] = []
    pos = 0
    first = h.first_timestamp
    varint = _varint
    for _ in range(h.records_count):
        # hot loop: most length varints are 1-2 bytes and most deltas 1 byte; those
        # are decoded inline, anything longer through _varint
        b = data[pos] if pos < n else 0x80
        if b < 0x80:
            z, pos = b, pos + 1
        elif pos + 1 < n and data[pos + 1] < 0x80:
            z, pos = (b & 0x7F) | (data[pos + 1] << 7), pos + 2
        else:
            z = -1
        if z >= 0:
            length = (z >> 1) ^ -(z & 1)
        else:
            length, pos = varint(data, pos, n, _VARINT32_BYTES_MAX)
        rec_end = pos + length
        if length < RECORD_MIN_BYTES - 1 or rec_end > n:
            raise ProtocolError(f"bad record length {length}", field="records")
        b = data[pos + 1]  # after the attributes byte (a record holds >= 6 more bytes)
        if b < 0x80:
            out.append(first + ((b >> 1) ^ -(b & 1)))
        else:
            delta, _ = varint(data, pos + 1, rec_end, _VARLONG_BYTES_MAX)
            out.append(first + delta)
        pos = rec_end
    return out
