"""Interop with kafka-python's own record batch code, both directions, every codec.

kafka-python reads snappy through the ``python-snappy`` module (raw snappy blocks, its own
xerial framing code around them); the dev extra installs it, so these tests use the real
module, as a kafka-python user's installation would.
"""

from __future__ import annotations

import kafka.codec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from riverbed.protocol.control_records import (
    ControlRecordType,
    build_end_txn_marker_batch,
    read_control_records,
)
from riverbed.protocol.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    iter_batches,
    iter_records,
    patch_base_offset,
    set_log_append_time,
    validate_batch,
)

ALL = list(CompressionType)


def test_kafka_python_has_real_snappy() -> None:
    import snappy

    assert kafka.codec.has_snappy()
    assert kafka.codec.snappy is snappy


def _records() -> list[SimpleRecord]:
    return [
        SimpleRecord(b"v0", key=b"k0", headers=[("trace", b"abc"), ("empty", b"")], timestamp=1),
        SimpleRecord(None, key=None, timestamp=1_700_000_000_000),
        SimpleRecord(b"", key=b"", headers=[("null", None)], timestamp=1_700_000_000_005),
        SimpleRecord(b"x" * 5000, key=b"big", timestamp=1_699_999_999_000),  # before the first
    ]


@pytest.mark.parametrize("compression", ALL)
def test_kafka_python_reads_riverbed_batches(compression: CompressionType) -> None:
    recs = _records()
    batch = build_batch(
        recs,
        base_offset=100,
        compression=compression,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        partition_leader_epoch=5,
    )
    kb = DefaultRecordBatch(batch)
    assert kb.validate_crc()
    assert kb.base_offset == 100 and kb.leader_epoch == 5
    assert kb.compression_type == int(compression)
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (42, 3, 17)
    assert kb.last_offset_delta == 3 and kb.records_count == 4
    assert kb.max_timestamp == 1_700_000_000_005 and kb.first_timestamp == 1
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kb]
    assert got == [
        (100 + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(recs)
    ]
    # MemoryRecords walks a buffer of several batches (as in a fetch response)
    two = batch + build_batch([SimpleRecord(b"next", timestamp=9)], base_offset=104)
    mr = MemoryRecords(two)
    offsets = []
    while (b := mr.next_batch()) is not None:
        offsets += [r.offset for r in b]
    assert offsets == [100, 101, 102, 103, 104]


@pytest.mark.parametrize("compression", ALL)
def test_riverbed_reads_kafka_python_batches(compression: CompressionType) -> None:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=True,
        producer_id=7,
        producer_epoch=1,
        base_sequence=30,
        batch_size=1 << 20,
    )
    recs = _records()
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    batch = bytes(builder.build())
    h = validate_batch(batch)
    assert h.compression is compression
    assert h.is_transactional and not h.is_control
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 30)
    assert h.records_count == 4 and h.last_offset_delta == 3
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch)]
    assert got == [(i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(recs)]


@pytest.mark.parametrize("compression", ALL)
def test_riverbed_reads_memory_records_builder(compression: CompressionType) -> None:
    mb = MemoryRecordsBuilder(magic=2, compression_type=int(compression), batch_size=1 << 20)
    for i in range(50):
        mb.append(timestamp=1000 + i, key=b"key-%d" % i, value=b"value-%d" % i * 20)
    mb.close()
    buf = bytes(mb.buffer())
    batches = list(iter_batches(buf))
    assert len(batches) == 1
    records = list(iter_records(buf))
    assert [r.offset for r in records] == list(range(50))
    assert [r.value for r in records] == [b"value-%d" % i * 20 for i in range(50)]
    assert [r.timestamp for r in records] == [1000 + i for i in range(50)]


@pytest.mark.parametrize("compression", ALL)
def test_log_append_time_seen_by_kafka_python(compression: CompressionType) -> None:
    buf = bytearray(build_batch(_records(), compression=compression))
    patch_base_offset(buf, 0, 500)
    set_log_append_time(buf, 0, 1_800_000_000_000)
    kb = DefaultRecordBatch(bytes(buf))
    assert kb.validate_crc()
    assert kb.timestamp_type == 1 and kb.base_offset == 500
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in kb] == [
        (500 + i, 1_800_000_000_000, 1) for i in range(4)
    ]


def test_control_batch_seen_by_kafka_python() -> None:
    batch = build_end_txn_marker_batch(
        True, producer_id=9, producer_epoch=2, coordinator_epoch=4, now_ms=123, base_offset=77
    )
    kb = DefaultRecordBatch(batch)
    assert kb.validate_crc() and kb.is_control_batch and kb.is_transactional
    (rec,) = list(kb)
    assert rec.commit and rec.type == ControlRecordType.COMMIT and rec.offset == 77
    assert read_control_records(batch)[0][1].type == ControlRecordType.COMMIT


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=50)),
            st.one_of(st.none(), st.binary(max_size=200)),
            st.integers(0, 2**42),
        ),
        min_size=1,
        max_size=20,
    ),
    compression=st.sampled_from(ALL),
)
def test_both_ways_property(
    values: list[tuple[bytes | None, bytes | None, int]], compression: CompressionType
) -> None:
    recs = [SimpleRecord(v, key=k, timestamp=ts) for k, v, ts in values]
    ours = build_batch(recs, compression=compression)
    theirs_read = [(r.key, r.value, r.timestamp) for r in DefaultRecordBatch(ours)]
    assert theirs_read == values
    builder = DefaultRecordBatchBuilder(2, int(compression), False, -1, -1, -1, 1 << 22)
    for i, (k, v, ts) in enumerate(values):
        builder.append(i, ts, k, v, [])
    ours_read = [(r.key, r.value, r.timestamp) for r in iter_records(bytes(builder.build()))]
    assert ours_read == values


# aiokafka carries its own (Cython) record batch code and cramjam-based codecs: a second
# independent reader and writer.


@pytest.mark.parametrize("compression", ALL)
def test_aiokafka_reads_riverbed_batches(compression: CompressionType) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch as AioBatch

    recs = _records()
    batch = build_batch(
        recs, base_offset=9, compression=compression, producer_id=3, producer_epoch=0,
        base_sequence=0,
    )  # fmt: skip
    ab = AioBatch(batch)
    assert ab.validate_crc() and ab.compression_type == int(compression)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ab]
    assert got == [
        (9 + i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(recs)
    ]


@pytest.mark.parametrize("compression", ALL)
def test_riverbed_reads_aiokafka_batches(compression: CompressionType) -> None:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

    builder = AioBuilder(2, int(compression), 0, 11, 2, 100, 1 << 20)
    recs = _records()
    for i, r in enumerate(recs):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    batch = bytes(builder.build())
    h = validate_batch(batch)
    assert h.compression is compression
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (11, 2, 100)
    got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in iter_records(batch)]
    assert got == [(i, r.timestamp, r.key, r.value, list(r.headers)) for i, r in enumerate(recs)]
