"""Record batch v2 headers: parse, validate, patch in place (the broker's hot path).

Wire format of one batch (magic 2), all integers big endian::

    offset  size  field
    0       8     baseOffset            int64
    8       4     batchLength           int32   bytes after this field (= size - 12)
    12      4     partitionLeaderEpoch  int32   not covered by the CRC
    16      1     magic                 int8    = 2
    17      4     crc                   uint32  CRC-32C (Castagnoli) of bytes 21..end
    21      2     attributes            int16   bits 0-2 compression, 3 timestamp type
                                                (0 CreateTime, 1 LogAppendTime),
                                                4 transactional, 5 control,
                                                6 has delete horizon (firstTimestamp is it)
    23      4     lastOffsetDelta       int32
    27      8     baseTimestamp         int64   ("firstTimestamp")
    35      8     maxTimestamp          int64
    43      8     producerId            int64
    51      2     producerEpoch         int16
    53      4     baseSequence          int32
    57      4     recordsCount          int32
    61      ...   records (compressed as one blob when attributes say so)

baseOffset and partitionLeaderEpoch sit outside the CRC so that a broker assigns them by
patching bytes in place; changing anything from attributes on needs the CRC recomputed.

Everything here works on ``bytes``, ``bytearray`` or ``memoryview`` without copying; the
CRC is computed by the ``crc32c`` C library over a memoryview slice.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, NamedTuple

from crc32c import crc32c

from riverbed.protocol.compression import CompressionType
from riverbed.protocol.exceptions import ProtocolError

__all__ = [
    "ATTR_COMPRESSION_MASK",
    "ATTR_CONTROL",
    "ATTR_DELETE_HORIZON",
    "ATTR_TIMESTAMP_TYPE",
    "ATTR_TRANSACTIONAL",
    "BATCH_HEADER_SIZE",
    "BATCH_OVERHEAD",
    "CRC_START",
    "LOG_OVERHEAD",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_MIN_BYTES",
    "BatchHeader",
    "Buffer",
    "TimestampType",
    "check_dense_offsets",
    "iter_batches",
    "parse_header",
    "patch_base_offset",
    "patch_partition_leader_epoch",
    "set_log_append_time",
    "valid_prefix",
    "validate_batch",
]

Buffer = bytes | bytearray | memoryview

BATCH_HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength
# batchLength of a batch with no records: everything after batchLength up to the records.
BATCH_OVERHEAD: Final = BATCH_HEADER_SIZE - LOG_OVERHEAD  # 49
MAGIC: Final = 2

_PLE_OFFSET: Final = 12
_MAGIC_OFFSET: Final = 16
_CRC_OFFSET: Final = 17
CRC_START: Final = 21  # attributes: first byte the CRC covers
_ATTRIBUTES_OFFSET: Final = 21
_MAX_TIMESTAMP_OFFSET: Final = 35

ATTR_COMPRESSION_MASK: Final = 0x07
ATTR_TIMESTAMP_TYPE: Final = 0x08
ATTR_TRANSACTIONAL: Final = 0x10
ATTR_CONTROL: Final = 0x20
ATTR_DELETE_HORIZON: Final = 0x40

NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

# Smallest encoded record: length, attributes, timestampDelta, offsetDelta, keyLength,
# valueLength, headerCount at one byte each.
RECORD_MIN_BYTES: Final = 7

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_INT64: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
_UINT32: Final = struct.Struct(">I")
_INT16: Final = struct.Struct(">h")
assert _HEADER.size == BATCH_HEADER_SIZE
_CODEC_MAX: Final = max(CompressionType)


class TimestampType:
    """Attribute bit 3 (Kafka's ``TimestampType`` ids for magic 2)."""

    CREATE_TIME: Final = 0
    LOG_APPEND_TIME: Final = 1


class BatchHeader(NamedTuple):
    """The 61-byte header of one record batch, as decoded from the wire.

    Immutable. A NamedTuple rather than a frozen dataclass because it is made once per
    batch on the produce/fetch/recovery paths, and a tuple is made in a tenth of the time.
    """

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch on the wire / in the log."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> CompressionType:
        return CompressionType(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 CreateTime, 1 LogAppendTime."""
        return 1 if self.attributes & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wraps at int32 max as Kafka's does), or -1."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 0x80000000

    @property
    def records_size(self) -> int:
        """Bytes of the (possibly compressed) records section."""
        return self.batch_length - BATCH_OVERHEAD


def parse_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``buf[pos:]``; the batch body need not be present.

    Raises ProtocolError when fewer than 61 bytes are there, the magic is not 2, or the
    header fields are impossible (batchLength too small, negative counts, more records than
    offsets, unknown codec).
    """
    h = _unpack(buf, pos)
    _check_fields(h, pos)
    return h


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """``parse_header`` plus: the whole batch present, CRC-32C, records fit.

    The CRC is checked before the fields it covers, so that a corrupted batch is reported
    as corrupt. Counts: a batch holds at most ``lastOffsetDelta + 1`` records (compaction
    may remove some but keeps lastOffsetDelta), and an uncompressed batch has room for that
    many records of at least 7 bytes each. Density (exactly ``lastOffsetDelta + 1``
    records, as required of a producer's batch) is :func:`check_dense_offsets`.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    return _validate(mv, pos, len(mv))


def _validate(
    mv: memoryview,
    pos: int,
    limit: int,
    _unpack_from: Callable[[Buffer, int], tuple[int, ...]] = _HEADER.unpack_from,
    _tuple_new: Callable[[type[BatchHeader], tuple[int, ...]], BatchHeader] = tuple.__new__,
) -> BatchHeader:
    """validate_batch's fast path: one unpack, one CRC, a few compares (hot loop).

    Anything unusual goes to :func:`_explain`, which finds and raises the precise error.
    """
    if pos < 0 or limit - pos < BATCH_HEADER_SIZE:
        raise _explain(mv, pos, limit)
    t = _unpack_from(mv, pos)
    # t: base_offset, batch_length, ple, magic, crc, attributes, last_offset_delta, ...
    batch_length = t[1]
    end = pos + LOG_OVERHEAD + batch_length
    if t[3] != MAGIC or batch_length < BATCH_OVERHEAD or end > limit:
        raise _explain(mv, pos, limit)
    if crc32c(mv[pos + CRC_START : end]) != t[4]:
        raise _explain(mv, pos, limit)
    codec = t[5] & ATTR_COMPRESSION_MASK
    count = t[12]
    if (
        count < 0
        or t[6] < 0
        or count > t[6] + 1
        or codec > _CODEC_MAX
        or (codec == 0 and count * RECORD_MIN_BYTES > batch_length - BATCH_OVERHEAD)
        or (count > 0 and batch_length == BATCH_OVERHEAD)
    ):
        raise _explain(mv, pos, limit)
    return _tuple_new(BatchHeader, t)


def _explain(mv: memoryview, pos: int, limit: int) -> ProtocolError:
    """The ProtocolError for the batch at ``pos`` that the fast path found wrong."""
    try:
        h = _unpack(mv[:limit], pos)
        end = pos + LOG_OVERHEAD + h.batch_length
        if end > limit:
            return ProtocolError(
                f"truncated record batch at position {pos}: batchLength {h.batch_length} "
                f"needs {end - pos} bytes, {limit - pos} present",
                field="records",
            )
        crc = crc32c(mv[pos + CRC_START : end])
        if crc != h.crc:
            return ProtocolError(
                f"record batch at position {pos} (baseOffset {h.base_offset}) is corrupt: "
                f"CRC-32C {crc:#010x} != stored {h.crc:#010x}",
                field="records",
            )
        _check_fields(h, pos)
        if (
            h.attributes & ATTR_COMPRESSION_MASK == 0 or h.batch_length == BATCH_OVERHEAD
        ) and h.records_count * RECORD_MIN_BYTES > h.batch_length - BATCH_OVERHEAD:
            return ProtocolError(
                f"record batch at position {pos}: {h.records_count} records cannot fit in "
                f"{h.batch_length - BATCH_OVERHEAD} bytes",
                field="records",
            )
    except ProtocolError as e:
        return e
    raise AssertionError(f"_explain found nothing wrong with the batch at {pos}")


def _unpack(buf: Buffer, pos: int) -> BatchHeader:
    """The header at ``pos`` with its CRC-independent fields checked (size, magic, length)."""
    available = len(buf) - pos
    if pos < 0 or available < BATCH_HEADER_SIZE:
        if pos >= 0 and available > _MAGIC_OFFSET and buf[pos + _MAGIC_OFFSET] != MAGIC:
            raise _bad_magic(buf[pos + _MAGIC_OFFSET], pos)
        raise ProtocolError(
            f"truncated record batch header at position {pos}: {max(available, 0)} of "
            f"{BATCH_HEADER_SIZE} bytes",
            field="records",
        )
    h = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise _bad_magic(h.magic, pos)
    if h.batch_length < BATCH_OVERHEAD:
        raise ProtocolError(
            f"record batch at position {pos}: batchLength {h.batch_length} is below the "
            f"minimum {BATCH_OVERHEAD}",
            field="records",
        )
    return h


def _check_fields(h: BatchHeader, pos: int) -> None:
    """The CRC-covered fields that can be checked without the records."""
    if h.records_count < 0 or h.last_offset_delta < 0:
        raise ProtocolError(
            f"record batch at position {pos}: negative recordsCount {h.records_count} or "
            f"lastOffsetDelta {h.last_offset_delta}",
            field="records",
        )
    if h.records_count > h.last_offset_delta + 1:
        raise ProtocolError(
            f"record batch at position {pos}: recordsCount {h.records_count} exceeds "
            f"lastOffsetDelta + 1 = {h.last_offset_delta + 1}",
            field="records",
        )
    if h.attributes & ATTR_COMPRESSION_MASK > _CODEC_MAX:
        raise ProtocolError(
            f"record batch at position {pos}: unknown compression type "
            f"{h.attributes & ATTR_COMPRESSION_MASK}",
            field="records",
        )


def _bad_magic(magic: int, pos: int) -> ProtocolError:
    return ProtocolError(
        f"record batch at position {pos}: unsupported magic {magic} (only v2 batches)",
        field="records",
    )


def has_transactional_records(topic_data: Iterable[Any]) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords`` of a Produce's ``topic_data``: some
    partition's first batch is transactional, judged by its attributes byte alone (no
    header parse on the hot path; a short or pre-v2 buffer is the append's to refuse)."""
    for topic in topic_data:
        for partition in topic.partition_data:
            records = partition.records
            if (
                records
                and len(records) >= BATCH_HEADER_SIZE
                and records[_MAGIC_OFFSET] == 2
                and records[_ATTRIBUTES_OFFSET + 1] & ATTR_TRANSACTIONAL
            ):
                return True
    return False


def check_dense_offsets(h: BatchHeader) -> None:
    """ProtocolError unless the batch has exactly ``lastOffsetDelta + 1`` records.

    Kafka requires this of every batch a producer sends (offsets are assigned densely);
    only the log cleaner produces batches with gaps.
    """
    if h.records_count != h.last_offset_delta + 1:
        raise ProtocolError(
            f"inconsistent batch offset range: recordsCount {h.records_count}, "
            f"lastOffsetDelta {h.last_offset_delta}",
            field="records",
        )


def iter_batches(buf: Buffer) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each batch in ``buf``, validated.

    Raises ProtocolError at the first bad or partial batch (after yielding the good ones
    before it).
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    pos = 0
    end = len(mv)
    while pos < end:
        h = _validate(mv, pos, end)
        yield pos, h
        pos += LOG_OVERHEAD + h.batch_length


def valid_prefix(buf: Buffer) -> tuple[int, list[BatchHeader]]:
    """Bytes of the leading whole valid batches of ``buf``, and their headers.

    For log recovery: everything from the returned length on is to be truncated.
    """
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    headers: list[BatchHeader] = []
    pos = 0
    end = len(mv)
    while pos < end:
        try:
            h = _validate(mv, pos, end)
        except ProtocolError:
            break
        headers.append(h)
        pos += LOG_OVERHEAD + h.batch_length
    return pos, headers


def _writable(buf: bytearray | memoryview, pos: int) -> memoryview:
    mv = buf if isinstance(buf, memoryview) else memoryview(buf)
    if mv.readonly:
        raise TypeError("record batch patching needs a writable buffer (bytearray)")
    if pos < 0 or len(mv) - pos < BATCH_HEADER_SIZE:
        raise ProtocolError(f"no record batch header at position {pos}", field="records")
    return mv


def patch_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Set baseOffset of the batch at ``pos`` (outside the CRC, so the CRC stays valid)."""
    _INT64.pack_into(_writable(buf, pos), pos, offset)


def patch_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Set partitionLeaderEpoch of the batch at ``pos`` (outside the CRC)."""
    _INT32.pack_into(_writable(buf, pos), pos + _PLE_OFFSET, epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, timestamp: int) -> None:
    """Mark the batch at ``pos`` LogAppendTime with maxTimestamp ``timestamp``.

    As Kafka's broker does for ``message.timestamp.type=LogAppendTime``: attribute bit 3 is
    set and maxTimestamp overwritten (readers then report it as every record's timestamp);
    the records and firstTimestamp are untouched. The CRC is recomputed; the batch must be
    whole in ``buf``.
    """
    mv = _writable(buf, pos)
    (batch_length,) = _INT32.unpack_from(mv, pos + 8)
    end = pos + LOG_OVERHEAD + batch_length
    if batch_length < BATCH_OVERHEAD or end > len(mv):
        raise ProtocolError(
            f"record batch at position {pos}: batchLength {batch_length} does not fit the buffer",
            field="records",
        )
    (attributes,) = _INT16.unpack_from(mv, pos + _ATTRIBUTES_OFFSET)
    _INT16.pack_into(mv, pos + _ATTRIBUTES_OFFSET, attributes | ATTR_TIMESTAMP_TYPE)
    _INT64.pack_into(mv, pos + _MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(mv, pos + _CRC_OFFSET, crc32c(mv[pos + CRC_START : end]))
