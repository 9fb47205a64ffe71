"""Records inside a v2 batch: iterate (decode) and build (encode).

The header and its in-place patches live in :mod:`riverbed.protocol.record_batch` and are
re-exported here, so ``riverbed.protocol.records`` is the one import for batches.

The records section (after the 61-byte header, decompressed as the attributes say) is
``recordsCount`` records, each::

    length          varint   bytes of the rest of this record
    attributes      int8     unused, 0
    timestampDelta  varlong  timestamp - batch firstTimestamp
    offsetDelta     varint   offset - batch baseOffset
    keyLength       varint   -1 = null key
    key             bytes
    valueLength     varint   -1 = null value
    value           bytes
    headerCount     varint
    headers         headerCount x (keyLength varint, key utf-8, valueLength varint
                                   (-1 = null), value)

varint/varlong are zigzag-encoded base-128 (protobuf's sint32/sint64), at most 5/10
bytes. With LogAppendTime (attributes bit 3) every record's timestamp is the batch's
maxTimestamp.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Final, NamedTuple

from crc32c import crc32c

from riverbed.protocol.compression import (
    DECOMPRESSED_MAX_BYTES,
    CompressionType,
    compress,
    decompress,
)
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.fastpath import fast
from riverbed.protocol.record_batch import (
    _CRC_OFFSET,
    _HEADER,
    _UINT32,
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    BATCH_OVERHEAD,
    CRC_START,
    LOG_OVERHEAD,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_MIN_BYTES,
    BatchHeader,
    Buffer,
    TimestampType,
    check_dense_offsets,
    iter_batches,
    parse_header,
    patch_base_offset,
    patch_partition_leader_epoch,
    set_log_append_time,
    valid_prefix,
    validate_batch,
)

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER_SIZE",
    "BATCH_OVERHEAD",
    "DECOMPRESSED_MAX_BYTES",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "BatchHeader",
    "Buffer",
    "CompressionType",
    "Record",
    "SimpleRecord",
    "TimestampType",
    "batch_values",
    "build_batch",
    "build_values_batch",
    "check_dense_offsets",
    "frame_batch",
    "iter_batches",
    "iter_records",
    "parse_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "recompressed_batch",
    "record_timestamps",
    "set_log_append_time",
    "valid_prefix",
    "validate_batch",
]

_INT32_MIN: Final = -(1 << 31)
_INT32_MAX: Final = (1 << 31) - 1
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


class Record(NamedTuple):
    """One decoded record: absolute offset and timestamp, key, value and headers.

    Immutable (a NamedTuple: one is made per record on decode paths, and a tuple is made
    several times faster than a frozen dataclass).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class SimpleRecord:
    """A record to build: ``timestamp=None`` takes ``build_batch``'s ``now_ms``."""

    value: bytes | None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


# ---------------------------------------------------------------------------- varints


def _read_varint(
    buf: bytes | memoryview, pos: int, end: int, max_bytes: int, what: str
) -> tuple[int, int]:
    """(zigzag-decoded value, next position) of the varint at ``pos``."""
    result = 0
    shift = 0
    limit = min(end, pos + max_bytes)
    while pos < limit:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
    if pos >= end:
        raise ProtocolError(f"truncated varint in record {what}", field="records")
    raise ProtocolError(f"varint longer than {max_bytes} bytes in record {what}", field="records")


def _write_varint(out: bytearray, value: int) -> None:
    z = (value << 1) ^ (value >> 63)
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)


# ---------------------------------------------------------------------------- decode


def iter_records(
    batch: Buffer, *, max_bytes: int = DECOMPRESSED_MAX_BYTES, verify: bool = True
) -> Iterator[Record]:
    """The records of the single batch ``batch`` (starting at its baseOffset).

    The batch is validated first (CRC included) unless ``verify`` is False; compressed
    records are decompressed into at most ``max_bytes``. Any inconsistency (a record
    running past its length or the section, counts that disagree, trailing bytes) raises
    ProtocolError.
    """
    h, data = _records_section(batch, max_bytes, verify)
    if data:
        yield from _decode_records(data, h, bool(h.attributes & ATTR_TIMESTAMP_TYPE))


def batch_values(
    batch: Buffer, *, max_bytes: int = DECOMPRESSED_MAX_BYTES, verify: bool = True
) -> list[bytes | None]:
    """The values of ``iter_records(batch)``'s records, with the same checks and errors.

    Snapshot loading reads a million values this way: the C fast path
    (``riverbed.protocol.fastpath``) parses a records section without headers in one
    call; any other section, a malformed one included, goes through ``iter_records``."""
    h, data = _records_section(batch, max_bytes, verify)
    if not data:
        return []
    if fast is not None:
        values: list[bytes | None] | None = fast.record_values(
            data, h.records_count, h.last_offset_delta
        )
        if values is not None:
            return values
    log_append = bool(h.attributes & ATTR_TIMESTAMP_TYPE)
    return [r.value for r in _decode_records(data, h, log_append)]


def _records_section(batch: Buffer, max_bytes: int, verify: bool) -> tuple[BatchHeader, bytes]:
    """The batch's header and its records section, decompressed ("" for a header-only
    batch); ProtocolError when the batch or the record count cannot be right."""
    h = validate_batch(batch) if verify else parse_header(batch)
    end = LOG_OVERHEAD + h.batch_length
    if end > len(batch):
        raise ProtocolError("truncated record batch", field="records")
    section = memoryview(batch)[BATCH_HEADER_SIZE:end]
    if not section and h.records_count == 0:
        return h, b""  # header-only batch (kept by the cleaner for producer state)
    codec = h.attributes & ATTR_COMPRESSION_MASK
    data = bytes(section) if codec == 0 else decompress(codec, section, max_bytes)
    if h.records_count * RECORD_MIN_BYTES > len(data):
        raise ProtocolError(
            f"{h.records_count} records cannot fit in {len(data)} bytes", field="records"
        )
    return h, data


def _decode_records(data: bytes, h: BatchHeader, log_append: bool) -> Iterator[Record]:
    # Hot loop for compaction, coordinators and Spark rows. Most varints in a record are
    # one byte (attributes, offsetDelta < 64, short lengths, header count); those are
    # decoded inline and everything else goes through _read_varint.
    pos = 0
    n = len(data)
    base_offset = h.base_offset
    first_ts = h.first_timestamp
    max_offset_delta = h.last_offset_delta
    read_varint = _read_varint
    read_bytes = _read_bytes
    new_record = tuple.__new__
    for _ in range(h.records_count):
        if pos < n and data[pos] < 0x80:
            b = data[pos]
            length, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            length, pos = read_varint(data, pos, n, 5, "length")
        rec_end = pos + length
        if length < RECORD_MIN_BYTES - 1 or rec_end > n:
            raise ProtocolError(f"bad record length {length}", field="records")
        pos += 1  # attributes: unused
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            ts_delta, pos = read_varint(data, pos, rec_end, 10, "timestampDelta")
        b = data[pos] if pos < rec_end else 0x80
        if b < 0x80:
            off_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
        else:
            off_delta, pos = read_varint(data, pos, rec_end, 5, "offsetDelta")
        if not 0 <= off_delta <= max_offset_delta:
            raise ProtocolError(
                f"record offsetDelta {off_delta} outside 0..{max_offset_delta}",
                field="records",
            )
        key, pos = read_bytes(data, pos, rec_end, "key")
        value, pos = read_bytes(data, pos, rec_end, "value")
        b = data[pos] if pos < rec_end else 0x80
        if b == 0:  # no headers, the common case
            pos += 1
            headers: list[tuple[str, bytes | None]] = []
        else:
            headers, pos = _read_headers(data, pos, rec_end)
        if pos != rec_end:
            raise ProtocolError(
                f"record length {length} disagrees with its fields", field="records"
            )
        ts = h.max_timestamp if log_append else first_ts + ts_delta
        yield new_record(Record, (base_offset + off_delta, ts, key, value, headers))
    if pos != n:
        raise ProtocolError(
            f"{n - pos} bytes after the {h.records_count} records of the batch",
            field="records",
        )


def record_timestamps(
    buf: bytes | bytearray | memoryview, position: int, h: BatchHeader
) -> list[int]:
    """Every record's timestamp, for a check that needs no other field: only the length,
    attributes and timestampDelta varints of each record are read.

    ``buf[position:]`` holds the whole (already CRC-validated) batch ``h``; a compressed
    one is decompressed into at most ``DECOMPRESSED_MAX_BYTES``.
    """
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
    varint = _read_varint
    for _ in range(h.records_count):
        # hot loop: most length varints are 1-2 bytes and most deltas 1 byte; those
        # are decoded inline, anything longer through _read_varint
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
            length, pos = varint(data, pos, n, 5, "length")
        rec_end = pos + length
        if length < RECORD_MIN_BYTES - 1 or rec_end > n:
            raise ProtocolError(f"bad record length {length}", field="records")
        b = data[pos + 1]  # after the attributes byte (a record holds >= 6 more bytes)
        if b < 0x80:
            out.append(first + ((b >> 1) ^ -(b & 1)))
        else:
            delta, _ = varint(data, pos + 1, rec_end, 10, "timestampDelta")
            out.append(first + delta)
        pos = rec_end
    return out


def _read_headers(
    data: bytes, pos: int, rec_end: int
) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = _read_varint(data, pos, rec_end, 5, "headerCount")
    if count < 0 or count * 2 > rec_end - pos:
        raise ProtocolError(f"bad record header count {count}", field="records")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        hkey, pos = _read_bytes(data, pos, rec_end, "header key")
        if hkey is None:
            raise ProtocolError("null record header key", field="records")
        try:
            name = hkey.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("record header key is not UTF-8", field="records") from None
        hval, pos = _read_bytes(data, pos, rec_end, "header value")
        headers.append((name, hval))
    return headers, pos


def _read_bytes(data: bytes, pos: int, end: int, what: str) -> tuple[bytes | None, int]:
    b = data[pos] if pos < end else 0x80
    if b < 0x80:
        length, pos = (b >> 1) ^ -(b & 1), pos + 1
    else:
        length, pos = _read_varint(data, pos, end, 5, what)
    if length == -1:
        return None, pos
    if length < 0 or pos + length > end:
        raise ProtocolError(f"bad record {what} length {length}", field="records")
    return data[pos : pos + length], pos + length


# ---------------------------------------------------------------------------- build


def build_batch(
    records: Iterable[SimpleRecord],
    *,
    base_offset: int = 0,
    compression: CompressionType | int = CompressionType.NONE,
    timestamp_type: int = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    is_transactional: bool = False,
    is_control: bool = False,
    now_ms: int = NO_TIMESTAMP,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` at offsets ``base_offset``, ``base_offset + 1``...

    Records without a timestamp get ``now_ms`` (-1, "no timestamp", unless given). With
    ``timestamp_type=1`` (LogAppendTime) maxTimestamp is ``now_ms`` when given, as a broker
    stamping the batch would write it.

    For the log cleaner, which keeps some records of a batch at their old offsets:
    ``offset_deltas`` (strictly increasing, one per record) replace 0, 1, 2...;
    ``last_offset_delta`` keeps the original batch's last offset even when its record is
    gone (and allows an empty, header-only batch, whose timestamps are ``now_ms``, as
    Kafka keeps for producer state); ``delete_horizon_ms`` sets attribute bit 6 and
    stores the horizon as firstTimestamp (record timestamps stay exact: deltas are taken
    from it). ValueError for inconsistent arguments or values out of their wire range.
    """
    recs = list(records)
    deltas, last_offset_delta = _offset_deltas(len(recs), offset_deltas, last_offset_delta)
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp_type must be 0 or 1, not {timestamp_type}")
    codec = CompressionType(compression)
    timestamps = [now_ms if r.timestamp is None else r.timestamp for r in recs]
    first_ts = timestamps[0] if recs else now_ms
    max_ts = max(timestamps) if recs else now_ms
    if timestamp_type == TimestampType.LOG_APPEND_TIME and now_ms != NO_TIMESTAMP:
        max_ts = now_ms
    if delete_horizon_ms is not None:
        first_ts = delete_horizon_ms

    body = _encode_records(recs, timestamps, deltas, first_ts)
    if not recs:
        codec = CompressionType.NONE  # an empty batch is header only, as Kafka writes it
    return frame_batch(
        body,
        len(recs),
        base_offset=base_offset,
        compression=codec,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        partition_leader_epoch=partition_leader_epoch,
        is_transactional=is_transactional,
        is_control=is_control,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        last_offset_delta=last_offset_delta,
        delete_horizon=delete_horizon_ms is not None,
    )


def recompressed_batch(
    batch: Buffer, compression: CompressionType | int, level: int | None = None
) -> bytes:
    """``batch`` (one whole v2 batch) with its records compressed with ``compression``
    instead, every header field kept (Kafka's LogValidator when a topic's
    ``compression.type`` differs from the producer's: the records are the same bytes once
    decompressed, only the section around them changes). ProtocolError when the batch's
    records cannot be decompressed within `DECOMPRESSED_MAX_BYTES`."""
    h, body = _records_section(batch, DECOMPRESSED_MAX_BYTES, verify=False)
    return frame_batch(
        body,
        h.records_count,
        base_offset=h.base_offset,
        compression=compression,
        timestamp_type=h.timestamp_type,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        partition_leader_epoch=h.partition_leader_epoch,
        first_timestamp=h.first_timestamp,
        max_timestamp=h.max_timestamp,
        last_offset_delta=h.last_offset_delta,
        is_transactional=h.is_transactional,
        is_control=h.is_control,
        delete_horizon=h.has_delete_horizon,
        level=level,
    )


def build_values_batch(
    values: Sequence[bytes],
    *,
    base_offset: int = 0,
    compression: CompressionType | int = CompressionType.NONE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    now_ms: int = NO_TIMESTAMP,
) -> bytes:
    """``build_batch([SimpleRecord(v) for v in values], ...)``, the same bytes: records with
    null keys, no headers and ``now_ms`` as their timestamp (a snapshot's batches). The C
    fast path writes the records section in one call."""
    body = fast.value_records(values) if fast is not None and values else None
    if body is None:
        return build_batch(
            [SimpleRecord(v) for v in values],
            base_offset=base_offset,
            compression=compression,
            partition_leader_epoch=partition_leader_epoch,
            now_ms=now_ms,
        )
    return frame_batch(
        body,
        len(values),
        base_offset=base_offset,
        compression=compression,
        timestamp_type=TimestampType.CREATE_TIME,
        producer_id=NO_PRODUCER_ID,
        producer_epoch=NO_PRODUCER_EPOCH,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=partition_leader_epoch,
        first_timestamp=now_ms,
        max_timestamp=now_ms,
        last_offset_delta=len(values) - 1,
    )


def _offset_deltas(
    count: int, offset_deltas: Sequence[int] | None, last_offset_delta: int | None
) -> tuple[list[int], int]:
    """The records' offset deltas and the batch's last offset delta, checked."""
    deltas = list(range(count)) if offset_deltas is None else list(offset_deltas)
    if len(deltas) != count:
        raise ValueError(f"{len(deltas)} offset_deltas for {count} records")
    if any(d < 0 for d in deltas[:1]) or any(a >= b for a, b in pairwise(deltas)):
        raise ValueError("offset_deltas must be non-negative and strictly increasing")
    if last_offset_delta is None:
        if not count:
            raise ValueError("a record batch needs a record or an explicit last_offset_delta")
        last_offset_delta = deltas[-1]
    if (count and last_offset_delta < deltas[-1]) or not 0 <= last_offset_delta <= _INT32_MAX:
        raise ValueError(f"last_offset_delta {last_offset_delta} does not cover the records")
    return deltas, last_offset_delta


def _encode_records(
    recs: Sequence[SimpleRecord], timestamps: Sequence[int], deltas: Sequence[int], first_ts: int
) -> bytearray:
    """The records of a v2 batch, each length-prefixed (KIP-98's record format)."""
    body = bytearray()
    rec = bytearray()
    for r, ts, offset_delta in zip(recs, timestamps, deltas, strict=True):
        rec.clear()
        rec.append(0)  # attributes
        delta = ts - first_ts
        if not _INT64_MIN <= delta <= _INT64_MAX:
            raise ValueError(f"timestamp {ts} too far from the first timestamp {first_ts}")
        _write_varint(rec, delta)
        _write_varint(rec, offset_delta)
        _write_bytes(rec, r.key)
        _write_bytes(rec, r.value)
        _write_varint(rec, len(r.headers))
        for name, value in r.headers:
            _write_bytes(rec, name.encode("utf-8"))
            _write_bytes(rec, value)
        _write_varint(body, len(rec))
        body += rec
    return body


def frame_batch(
    body: bytes | bytearray,
    records_count: int,
    *,
    base_offset: int,
    compression: CompressionType | int,
    timestamp_type: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
    first_timestamp: int,
    max_timestamp: int,
    last_offset_delta: int,
    is_transactional: bool = False,
    is_control: bool = False,
    delete_horizon: bool = False,
    level: int | None = None,
) -> bytes:
    """A v2 batch around ``body``, the uncompressed encoded records (``records_count``
    of them): compressed as asked (at ``level``: `compress`'s), header packed, CRC
    computed. The log cleaner frames record bytes it kept from an old batch with it;
    `build_batch` frames new ones, `recompressed_batch` a client's in another codec."""
    codec = CompressionType(compression)
    payload = compress(codec, body, level) if codec != CompressionType.NONE else body
    batch_length = BATCH_OVERHEAD + len(payload)
    if batch_length > _INT32_MAX:
        raise ValueError(f"record batch of {batch_length} bytes exceeds int32")
    attributes = (
        int(codec)
        | (ATTR_TIMESTAMP_TYPE if timestamp_type else 0)
        | (ATTR_TRANSACTIONAL if is_transactional else 0)
        | (ATTR_CONTROL if is_control else 0)
        | (ATTR_DELETE_HORIZON if delete_horizon else 0)
    )
    out = bytearray(BATCH_HEADER_SIZE)
    try:
        _HEADER.pack_into(
            out,
            0,
            base_offset,
            batch_length,
            partition_leader_epoch,
            MAGIC,
            0,  # crc, filled in below
            attributes,
            last_offset_delta,
            first_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
    except struct.error as e:
        raise ValueError(f"record batch header field out of range: {e}") from None
    out += payload
    _UINT32.pack_into(out, _CRC_OFFSET, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
        return
    _write_varint(out, len(data))
    out += data
