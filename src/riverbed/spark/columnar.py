"""Record batches of a Fetch response -> Arrow record batches, without a Python step per record.

Per **batch** (Python, a few microseconds each): the 61-byte header is unpacked and checked,
the CRC-32C of every batch verified by the ``crc32c`` C library, control batches skipped,
aborted transactions dropped (``read_committed``), the records decompressed by the codec
libraries (:mod:`riverbed.protocol.compression`). Per **record**: the compiled decoder
``riverbed.spark._columnar`` (``_columnar.c``) reads the varints, keys, values and headers of
all the batches of a response in one call and writes them straight into the buffers of the
Arrow arrays (offsets + data for binary columns, int64 offsets and microsecond timestamps,
the headers' list/struct children); :func:`pyarrow.Array.from_buffers` wraps those buffers
without a copy.

Why a C extension: the decoder is ~400 lines of plain C with no dependency but Python's
headers, built by ``make`` (``python hatch_build.py``) and by hatchling's build hook for
wheels; numba, the other candidate, does not support the numpy (2.4) riverbed uses, would
add ~100 MB of LLVM to every executor and compiles for seconds in each new Python worker;
Cython would add a build dependency and generated code for what is a byte loop. Where the
module is missing (no C compiler when installed) records decode in Python with the
protocol's own record codec (:func:`riverbed.protocol.records.iter_records`' loop): same
results, several times slower, logged once per worker.

Rules, as the Java consumer applies them (``CompletedFetch.nextFetchedRecord``):

- offsets and timestamps are the records' own (compacted topics keep their gaps); with
  LogAppendTime (attributes bit 3) every record's timestamp is the batch's maxTimestamp;
- control batches (transaction markers) never become rows;
- ``read_committed``: nothing at or past the last stable offset is returned, and a
  transactional batch is dropped when its producer has an aborted transaction (from the
  response's ``aborted_transactions``) whose first offset is at or before the batch's last
  offset, until that producer's ABORT marker is passed.

A batch cut off at the end of the response (the fetch size limit) is left for the next
fetch. A corrupt batch (CRC, header fields, records) raises :class:`CorruptRecordError`
naming the partition and the offset.
"""

from __future__ import annotations

import functools
import heapq
import logging
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from riverbed.protocol.compression import DECOMPRESSED_MAX_BYTES, decompress
from riverbed.protocol.control_records import ControlRecordType, decode_control_key
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.record_batch import CRC_START
from riverbed.protocol.records import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    BATCH_HEADER_SIZE,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    iter_records,
)
from riverbed.spark.client import RiverbedSourceError
from riverbed.spark.schema import arrow_schema

try:
    from riverbed.spark import _columnar  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler): the pure-Python decoder below
    _columnar = None

log = logging.getLogger(__name__)

# Decompressed record bytes decoded in one call (and so in one Arrow batch at most): keeps
# the int32 offsets of Arrow's binary columns far from overflowing and bounds memory.
decode_bytes_max: Final = 256 * 1024 * 1024

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_CODEC_MAX: Final = 4
_TIMESTAMP_MS_MAX: Final = (2**63 - 1) // 1000
_warned_fallback = False


class CorruptRecordError(RiverbedSourceError):
    """A record batch that does not decode: names the partition and the offset."""


@dataclass(frozen=True)
class Decoded:
    """What one response's records gave: Arrow batches, where to fetch next, and the size
    of a first batch the response could not hold whole (0 when there was none)."""

    batches: list[pa.RecordBatch]
    next_offset: int
    oversized_batch_bytes: int


def compiled() -> bool:
    """Is the C decoder in use (else the pure-Python one)?"""
    return _columnar is not None


class _AbortTracker:
    """The Java consumer's aborted-transaction filter for one fetch response."""

    def __init__(self, aborted: Sequence[tuple[int, int]] | None) -> None:
        # (first_offset, producer_id), smallest first offset first
        self.queue = [(first, pid) for pid, first in aborted or ()]
        heapq.heapify(self.queue)
        self.producers: set[int] = set()

    def skip(self, h: BatchHeader, abort_marker: bool) -> bool:
        """Is batch ``h`` (of a producer id) part of an aborted transaction?"""
        last = h.base_offset + h.last_offset_delta
        while self.queue and self.queue[0][0] <= last:
            self.producers.add(heapq.heappop(self.queue)[1])
        if abort_marker:
            self.producers.discard(h.producer_id)
            return False
        return bool(h.attributes & ATTR_TRANSACTIONAL) and h.producer_id in self.producers


def _is_abort_marker(batch: memoryview) -> bool:
    for record in iter_records(batch, verify=False):
        key = decode_control_key(record.key)
        return key.type == ControlRecordType.ABORT
    return False


@functools.cache
def _schema(include_headers: bool) -> pa.Schema:
    return arrow_schema(include_headers)


class _Partition:
    """Decoding context of one topic-partition: names, schema, the columns it repeats."""

    def __init__(self, topic: str, partition: int, include_headers: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.name = f"{topic}-{partition}"
        self.include_headers = include_headers
        self.schema = _schema(include_headers)

    def corrupt(self, offset: int, detail: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"corrupt record batch in {self.name} at offset {offset}: {detail}"
        )


def _check_header(p: _Partition, h: BatchHeader, mv: memoryview, pos: int, end: int) -> None:
    if h.magic != MAGIC:
        raise p.corrupt(h.base_offset, f"unsupported magic {h.magic} (only v2 batches)")
    crc = crc32c(mv[pos + CRC_START : end])
    if crc != h.crc:
        raise p.corrupt(h.base_offset, f"CRC-32C {crc:#010x} != stored {h.crc:#010x}")
    if (
        h.records_count < 0
        or h.last_offset_delta < 0
        or h.records_count > h.last_offset_delta + 1
        or h.attributes & ATTR_COMPRESSION_MASK > _CODEC_MAX
    ):
        raise p.corrupt(
            h.base_offset,
            f"impossible header (recordsCount {h.records_count}, lastOffsetDelta "
            f"{h.last_offset_delta}, attributes {h.attributes:#x})",
        )


def _decoder_input(
    p: _Partition, h: BatchHeader, mv: memoryview, pos: int, end: int
) -> tuple[Any, ...]:
    """What the C decoder takes of one batch: its records (decompressed) and header fields."""
    data: bytes | memoryview = mv[pos + BATCH_HEADER_SIZE : end]
    codec = h.attributes & ATTR_COMPRESSION_MASK
    if codec:
        try:
            data = decompress(codec, data, DECOMPRESSED_MAX_BYTES)
        except ProtocolError as e:
            raise p.corrupt(h.base_offset, str(e)) from None
    log_append = 1 if h.attributes & ATTR_TIMESTAMP_TYPE else 0
    return (
        data,
        h.base_offset,
        h.first_timestamp,
        h.max_timestamp,
        log_append,
        h.records_count,
        h.last_offset_delta,
    )


def decode_records(
    records: bytes | memoryview,
    *,
    topic: str,
    partition: int,
    from_offset: int,
    until_offset: int,
    include_headers: bool,
    read_committed: bool = False,
    last_stable_offset: int = -1,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> Decoded:
    """The rows of ``records`` (a Fetch response's record set) with offsets in
    ``[from_offset, until_offset)``; ``aborted`` is the response's (producer id, first
    offset) list and ``last_stable_offset`` its LSO (-1: not given)."""
    p = _Partition(topic, partition, include_headers)
    hi = until_offset
    if read_committed and last_stable_offset >= 0:
        hi = min(hi, last_stable_offset)
    mv = memoryview(records)
    end = len(mv)
    pos = 0
    next_offset = from_offset
    tracker = _AbortTracker(aborted) if read_committed else None
    pending: list[tuple[Any, ...]] = []
    pending_bytes = 0
    out: list[pa.RecordBatch] = []
    while end - pos >= BATCH_HEADER_SIZE:
        h = BatchHeader._make(_HEADER.unpack_from(mv, pos))
        if h.batch_length < BATCH_OVERHEAD:
            raise p.corrupt(h.base_offset, f"batchLength {h.batch_length} below the minimum")
        batch_end = pos + LOG_OVERHEAD + h.batch_length
        if batch_end > end:
            break  # cut off by the fetch size: fetched again next time
        _check_header(p, h, mv, pos, batch_end)
        if h.base_offset >= hi:
            # no record between the fetch offset and this batch: the range is done
            next_offset = max(next_offset, hi)
            break
        batch_next = h.base_offset + h.last_offset_delta + 1
        control = bool(h.attributes & ATTR_CONTROL)
        if tracker is not None and h.producer_id >= 0:
            marker = control and _is_abort_marker(mv[pos:batch_end])
            if tracker.skip(h, marker):
                next_offset = max(next_offset, min(batch_next, hi))
                pos = batch_end
                continue
        if not control and batch_next > from_offset:
            entry = _decoder_input(p, h, mv, pos, batch_end)
            pending.append(entry)
            pending_bytes += len(entry[0])
            if pending_bytes >= decode_bytes_max:
                out.append(_decode(p, pending, from_offset, hi))
                pending, pending_bytes = [], 0
        next_offset = max(next_offset, min(batch_next, hi))
        pos = batch_end
    if pending:
        out.append(_decode(p, pending, from_offset, hi))
    oversized = 0
    if pos == 0 and end >= LOG_OVERHEAD:
        (length,) = struct.unpack_from(">i", mv, 8)
        if LOG_OVERHEAD + length > end:
            oversized = LOG_OVERHEAD + length
    return Decoded([b for b in out if b.num_rows], next_offset, oversized)


def _decode(p: _Partition, batches: list[tuple[Any, ...]], lo: int, hi: int) -> pa.RecordBatch:
    if _columnar is None:
        return _decode_python(p, batches, lo, hi)
    try:
        result = _columnar.decode(batches, lo, hi, p.include_headers)
    except _columnar.DecodeError as e:
        raise CorruptRecordError(f"corrupt {p.name}: {e}") from None
    return _assemble(p, result)


def _assemble(p: _Partition, r: tuple[Any, ...]) -> pa.RecordBatch:
    n, offsets, stamps, ts_types = r[0], r[1], r[2], r[3]
    key = _binary(pa.binary(), n, r[4], r[5], r[6], r[7])
    value = _binary(pa.binary(), n, r[8], r[9], r[10], r[11])
    schema = p.schema
    columns = [
        key,
        value,
        pa.repeat(pa.scalar(p.topic, pa.string()), n),
        pa.repeat(pa.scalar(p.partition, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(offsets)]),
        pa.Array.from_buffers(schema.field("timestamp").type, n, [None, pa.py_buffer(stamps)]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(ts_types)]),
    ]
    if p.include_headers:
        columns.append(_headers(schema.field("headers").type, n, r[12:]))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _binary(
    kind: pa.DataType, n: int, valid: bytearray, offsets: bytearray, nulls: int, data: bytearray
) -> pa.Array:
    bitmap = pa.py_buffer(valid) if nulls else None
    return pa.Array.from_buffers(
        kind, n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls
    )


def _headers(list_type: pa.DataType, n: int, r: tuple[Any, ...]) -> pa.Array:
    list_offsets, key_offsets, key_data = r[0], r[1], r[2]
    count = len(key_offsets) // 4 - 1
    keys = pa.Array.from_buffers(
        pa.string(), count, [None, pa.py_buffer(key_offsets), pa.py_buffer(key_data)]
    )
    values = _binary(pa.binary(), count, r[3], r[4], r[5], r[6])
    items = pa.StructArray.from_arrays([keys, values], fields=list(list_type.value_type))
    bounds = np.frombuffer(list_offsets, dtype=np.int32)
    # As Spark's Kafka source: a record without headers has null headers, not [].
    mask = pa.array(bounds[1:] == bounds[:-1])
    return pa.ListArray.from_arrays(
        pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(list_offsets)]),
        items,
        type=list_type,
        mask=mask,
    )


def _decode_python(
    p: _Partition, batches: list[tuple[Any, ...]], lo: int, hi: int
) -> pa.RecordBatch:
    """The same rows as the C decoder, from the protocol's record codec (a Python step
    per record: the fallback when the C extension is not built)."""
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        log.warning(
            "riverbed.spark._columnar is not built (no C compiler at install?): records "
            "decode in Python, several times slower; run `make` or reinstall riverbed"
        )
    rows: list[tuple[int, int, int, bytes | None, bytes | None, list[Any]]] = []
    for data, base, first_ts, max_ts, log_append, count, last_delta in batches:
        h = BatchHeader(base, 0, 0, MAGIC, 0, 0, last_delta, first_ts, max_ts, -1, -1, -1, count)
        try:
            records = list(_decode_section(bytes(data), h, bool(log_append)))
        except ProtocolError as e:
            raise p.corrupt(base, str(e)) from None
        for r in records:
            if lo <= r.offset < hi:
                if not -_TIMESTAMP_MS_MAX <= r.timestamp <= _TIMESTAMP_MS_MAX:
                    raise p.corrupt(r.offset, "timestamp out of the range of Spark's timestamps")
                rows.append((r.offset, r.timestamp * 1000, log_append, r.key, r.value, r.headers))
    schema = p.schema
    n = len(rows)
    columns = [
        pa.array([r[3] for r in rows], type=pa.binary()),
        pa.array([r[4] for r in rows], type=pa.binary()),
        pa.repeat(pa.scalar(p.topic, pa.string()), n),
        pa.repeat(pa.scalar(p.partition, pa.int32()), n),
        pa.array([r[0] for r in rows], type=pa.int64()),
        pa.array([r[1] for r in rows], type=pa.int64()).view(schema.field("timestamp").type),
        pa.array([r[2] for r in rows], type=pa.int32()),
    ]
    if p.include_headers:
        headers = [[{"key": k, "value": v} for k, v in r[5]] or None for r in rows]
        columns.append(pa.array(headers, type=schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _decode_section(data: bytes, h: BatchHeader, log_append: bool) -> Any:
    from riverbed.protocol.records import _decode_records

    if h.records_count * 7 > len(data):
        raise ProtocolError(f"{h.records_count} records cannot fit in {len(data)} bytes")
    return _decode_records(data, h, log_append)
