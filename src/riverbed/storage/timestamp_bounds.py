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

from riverbed.protocol.record_batch import BatchHeader
from riverbed.protocol.records import record_timestamps
from riverbed.storage.config import LONG_MAX
from riverbed.storage.time_index import NO_TIMESTAMP

__all__ = ["create_time_violation", "out_of_bounds"]


def out_of_bounds(ts: int, now_ms: int, before_max_ms: int, after_max_ms: int) -> bool:
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
        if out_of_bounds(ts, now_ms, before_max_ms, after_max_ms):
            return ts
    if before_max_ms >= LONG_MAX or h.records_count <= 1:
        return None
    for ts in record_timestamps(buf, position, h):
        if out_of_bounds(ts, now_ms, before_max_ms, after_max_ms):
            return ts
    return None
