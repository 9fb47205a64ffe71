"""Control records: keys, transaction markers, KRaft control batches."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riverbed.protocol.control_records import (
    ControlRecordKey,
    ControlRecordType,
    EndTxnMarker,
    build_control_batch,
    build_control_records_batch,
    build_end_txn_marker_batch,
    decode_control_key,
    decode_end_txn_marker,
    encode_control_key,
    encode_end_txn_marker,
    read_control_records,
)
from riverbed.protocol.exceptions import ProtocolError
from riverbed.protocol.records import (
    CompressionType,
    SimpleRecord,
    build_batch,
    iter_records,
    validate_batch,
)


def test_control_record_type_ids_are_kafkas() -> None:
    assert [(t.name, int(t)) for t in ControlRecordType] == [
        ("ABORT", 0),
        ("COMMIT", 1),
        ("LEADER_CHANGE", 2),
        ("SNAPSHOT_HEADER", 3),
        ("SNAPSHOT_FOOTER", 4),
        ("KRAFT_VERSION", 5),
        ("KRAFT_VOTERS", 6),
    ]


@given(kind=st.sampled_from(ControlRecordType))
def test_key_round_trip(kind: ControlRecordType) -> None:
    key = encode_control_key(kind)
    assert key == struct.pack(">hh", 0, int(kind))
    assert decode_control_key(key) == ControlRecordKey(0, int(kind))
    assert decode_control_key(key).known_type is kind


def test_key_of_a_newer_version_or_unknown_type() -> None:
    # Newer versions are read as version 0 with trailing fields ignored, as Kafka does.
    assert decode_control_key(struct.pack(">hhi", 3, 1, 99)) == ControlRecordKey(3, 1)
    unknown = decode_control_key(struct.pack(">hh", 0, 42))
    assert unknown.type == 42 and unknown.known_type is None


@pytest.mark.parametrize(
    ("key", "match"),
    [(None, "without a key"), (b"\x00\x00\x00", "3 bytes"), (b"\xff\xff\x00\x01", "version -1")],
)
def test_bad_keys(key: bytes | None, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_control_key(key)


@settings(max_examples=50)
@given(epoch=st.integers(-(2**31), 2**31 - 1))
def test_end_txn_marker_value(epoch: int) -> None:
    value = encode_end_txn_marker(epoch)
    assert value == struct.pack(">hi", 0, epoch)
    assert decode_end_txn_marker(value) == EndTxnMarker(epoch, 0)


@pytest.mark.parametrize(
    ("value", "match"), [(None, "without a value"), (b"\x00\x00\x00", "3 bytes")]
)
def test_bad_marker_values(value: bytes | None, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        decode_end_txn_marker(value)


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_marker_batch(commit: bool) -> None:
    batch = build_end_txn_marker_batch(
        commit,
        producer_id=1234,
        producer_epoch=5,
        coordinator_epoch=17,
        now_ms=1_700_000_000_000,
        base_offset=88,
        partition_leader_epoch=3,
    )
    h = validate_batch(batch)
    assert h.is_control and h.is_transactional
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (1234, 5, -1)
    assert (h.base_offset, h.partition_leader_epoch, h.records_count) == (88, 3, 1)
    assert h.compression is CompressionType.NONE
    ((offset, key, value),) = read_control_records(batch)
    assert offset == 88
    assert key.known_type is (ControlRecordType.COMMIT if commit else ControlRecordType.ABORT)
    assert decode_end_txn_marker(value) == EndTxnMarker(17)
    (rec,) = list(iter_records(batch))
    assert rec.timestamp == 1_700_000_000_000


@pytest.mark.parametrize("compression", list(CompressionType))
@pytest.mark.parametrize(
    "kind",
    [
        ControlRecordType.LEADER_CHANGE,
        ControlRecordType.SNAPSHOT_HEADER,
        ControlRecordType.SNAPSHOT_FOOTER,
        ControlRecordType.KRAFT_VERSION,
        ControlRecordType.KRAFT_VOTERS,
    ],
)
def test_kraft_control_batch(kind: ControlRecordType, compression: CompressionType) -> None:
    value = b"\x00\x01encoded-schema-message"  # stands in for the message engine's bytes
    batch = build_control_batch(kind, value, now_ms=5, base_offset=10, compression=compression)
    h = validate_batch(batch)
    assert h.is_control and not h.is_transactional and h.producer_id == -1
    assert read_control_records(batch) == [(10, ControlRecordKey(0, int(kind)), value)]


def test_read_control_records_rejects_data_batches() -> None:
    batch = build_batch([SimpleRecord(b"v", key=b"\x00\x00\x00\x01", timestamp=1)])
    with pytest.raises(ProtocolError, match="not a control batch"):
        read_control_records(batch)
    # A control batch whose record key is too short to be a control key
    bad = build_batch([SimpleRecord(b"v", key=b"\x00", timestamp=1)], is_control=True)
    with pytest.raises(ProtocolError, match="control record key"):
        read_control_records(bad)


def test_control_batch_of_several_records() -> None:
    entries = [
        (ControlRecordType.KRAFT_VERSION, b"\x00\x01"),
        (ControlRecordType.KRAFT_VOTERS, b"v"),
    ]
    batch = build_control_records_batch(entries, now_ms=9, base_offset=3)
    assert validate_batch(batch).records_count == 2
    assert read_control_records(batch) == [
        (3, ControlRecordKey(0, 5), b"\x00\x01"),
        (4, ControlRecordKey(0, 6), b"v"),
    ]
